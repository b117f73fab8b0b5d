# The gateway service's azd postdeploy hook on Windows: what
# tenant-images.sh does (see there), in PowerShell.
$ErrorActionPreference = 'Stop'

$image = $env:SERVICE_GATEWAY_IMAGE_NAME
if (-not $image) { throw 'azd sets SERVICE_GATEWAY_IMAGE_NAME when it deploys the gateway' }
$apps = @(($env:GATEWAY_TENANT_APPS -split ' ') | Where-Object { $_ })
if ($apps.Count -eq 0) {
    Write-Output 'no isolated tenants: nothing to update'
    exit 0
}
if (-not $env:AZURE_RESOURCE_GROUP) { throw 'run azd provision first' }

foreach ($app in $apps) {
    Write-Output "tenant app ${app}: $image"
    az containerapp update --subscription $env:AZURE_SUBSCRIPTION_ID --resource-group $env:AZURE_RESOURCE_GROUP `
        --name $app --container-name gateway --image $image --output none
    if ($LASTEXITCODE -ne 0) { throw "az containerapp update $app failed" }
}
