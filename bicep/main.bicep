// The gateway on Azure Container Apps, ready for `azd up` (azure.yaml at the
// repository root points here). Subscription scope, as azd expects: it makes
// the resource group and deploys modules/gateway.bicep into it.
targetScope = 'subscription'

@minLength(1)
@maxLength(48)
@description('azd environment name; names the resource group and prefixes resources.')
param environmentName string

@minLength(1)
@description('Region for every new resource.')
param location string

@description('Name of the existing Azure OpenAI (or AI Services) account the gateway calls with its managed identity.')
param openAiAccountName string

@description('Resource group of that account. Default: the one this deployment creates.')
param openAiResourceGroup string = ''

@description('Public model name → Azure deployment name, for the generated config.')
param models object = {
  'gpt-4o-mini': 'gpt-4o-mini'
}

@description('JWT issuer the gateway trusts (auth.issuer). Required unless gatewayConfig or gatewayConfigKeyVaultSecretUri is given: the gateway refuses to start without it.')
param authIssuer string = ''

@description('JWT audiences the gateway accepts (auth.audiences).')
param authAudiences array = ['api://llm-gateway']

@description('Tenant table for the generated config: [{id, models, requests, interval}]. Empty: one tenant "default" with every model at 600 requests a minute.')
param tenants array = []

@secure()
@description('A complete gateway config (YAML or JSON). Empty: a config is generated from the parameters above.')
param gatewayConfig string = ''

@description('Key Vault secret URI holding the complete gateway config; wins over gatewayConfig.')
param gatewayConfigKeyVaultSecretUri string = ''

@description('Name of a Key Vault in the new resource group whose secrets the app may read (Key Vault Secrets User for the identity). Empty: none.')
param keyVaultName string = ''

@description('Extra env vars from Key Vault: [{env, secretUri}], e.g. backend keys named by api_key_env.')
param keyVaultEnv array = []

@description('Container image. azd deploy replaces it with the image it builds; the placeholder only lets the first provision succeed.')
param gatewayImage string = 'mcr.microsoft.com/azuredocs/containerapps-helloworld:latest'

@minValue(1)
@maxValue(300)
param maxReplicas int = 10

@description('Concurrent requests (open streams included) per replica before another replica starts.')
param concurrentRequests int = 200

@description('vCPUs per replica. Consumption profile: memory must be twice this in Gi.')
param cpu string = '1.0'

param memory string = '2Gi'

@description('Add Azure Cache for Redis for the shared rate-limit store.')
param enableRedis bool = false

var tags = { 'azd-env-name': environmentName }

resource rg 'Microsoft.Resources/resourceGroups@2024-03-01' = {
  name: 'rg-${environmentName}'
  location: location
  tags: tags
}

module gateway 'modules/gateway.bicep' = {
  name: 'gateway'
  scope: rg
  params: {
    environmentName: environmentName
    location: location
    tags: tags
    openAiAccountName: openAiAccountName
    openAiResourceGroup: empty(openAiResourceGroup) ? rg.name : openAiResourceGroup
    models: models
    authIssuer: authIssuer
    authAudiences: authAudiences
    tenants: tenants
    gatewayConfig: gatewayConfig
    gatewayConfigKeyVaultSecretUri: gatewayConfigKeyVaultSecretUri
    keyVaultName: keyVaultName
    keyVaultEnv: keyVaultEnv
    gatewayImage: gatewayImage
    maxReplicas: maxReplicas
    concurrentRequests: concurrentRequests
    cpu: cpu
    memory: memory
    enableRedis: enableRedis
  }
}

output AZURE_RESOURCE_GROUP string = rg.name
output AZURE_CONTAINER_REGISTRY_ENDPOINT string = gateway.outputs.registryLoginServer
output AZURE_CLIENT_ID string = gateway.outputs.identityClientId
output GATEWAY_URL string = gateway.outputs.url
