# azd's predown hook on Windows: what predown.sh does (see there), in
# PowerShell.
$ErrorActionPreference = 'Stop'

$sub = $env:AZURE_SUBSCRIPTION_ID
if (-not $sub) { throw 'azd sets AZURE_SUBSCRIPTION_ID' }
$rg = $env:AZURE_RESOURCE_GROUP
if (-not $rg) {
    Write-Output 'no AZURE_RESOURCE_GROUP: nothing was provisioned, no role assignment to remove'
    exit 0
}
if ((az --subscription $sub group exists --name $rg) -ne 'true') {
    Write-Output "resource group $rg does not exist: no role assignment to remove"
    exit 0
}
$principals = @(az --subscription $sub identity list -g $rg --query '[].principalId' -o tsv | Where-Object { $_ })
if ($LASTEXITCODE -ne 0) { throw "az identity list -g $rg failed" }
foreach ($principal in $principals) {
    $ids = @(az --subscription $sub role assignment list --all --assignee $principal --query '[].id' -o tsv | Where-Object { $_ })
    if ($LASTEXITCODE -ne 0) { throw "az role assignment list for $principal failed" }
    foreach ($ra in $ids) {
        Write-Output "deleting role assignment $ra"
        az --subscription $sub role assignment delete --ids $ra
        if ($LASTEXITCODE -ne 0) { throw "az role assignment delete $ra failed" }
    }
}
Write-Output "role assignments of ${rg}'s identities removed"
