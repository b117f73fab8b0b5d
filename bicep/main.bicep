// The gateway on Azure Container Apps, ready for `azd up` (azure.yaml at the
// repository root points here). Subscription scope, as azd expects: it makes
// the resource group and deploys modules/gateway.bicep into it. Every
// parameter is set from an azd environment variable in main.parameters.json;
// an unset variable leaves the default below.
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

@minLength(1)
@description('Resource group of that account. Required: an existing account is never in the group this deployment creates.')
param openAiResourceGroup string

@description('Public model name → Azure deployment name.')
param models object = {
  'gpt-4o-mini': 'gpt-4o-mini'
}

@description('Directory (tenant) ID of the Entra tenant that holds the API\'s app registration and issues its tokens. Default: the subscription\'s directory.')
param entraTenantId string = tenant().tenantId

@minLength(1)
@description('Application (client) ID of the API\'s app registration: the aud of its v2.0 access tokens.')
param apiClientId string

@description('Application ID URI of the API (the aud of v1.0 tokens, and the scope prefix). Default: api://{apiClientId}.')
param apiAppIdUri string = ''

@description('Tenant table of the shared gateway: [{id, name, models, requests, interval}], id an Entra directory ID (the token\'s tid), name for people (logged as tenant_name); requests and interval default to 600 and 1m. Default: the API\'s directory, every model, 600 requests a minute.')
param tenants array = []

@description('Isolated tenants, one scale-to-zero app each. Default: none.')
param isolatedTenants isolatedTenant[] = []

@description('App roles (the token\'s roles claim) of which a token must carry one, unless it carries one of requiredScopes. Default: none required.')
param requiredRoles array = []

@description('Delegated scopes (the token\'s scp claim) of which a token must carry one, unless it carries one of requiredRoles. Default: none required.')
param requiredScopes array = []

@secure()
@description('A complete gateway config (YAML or JSON). Empty: a config is generated from the parameters above.')
param gatewayConfig string = ''

@description('Key Vault secret URI holding the complete gateway config; wins over gatewayConfig.')
param gatewayConfigKeyVaultSecretUri string = ''

@description('Name of an existing Key Vault whose secrets the app may read (Key Vault Secrets User for the identity). Empty: none.')
param keyVaultName string = ''

@description('Resource group of that vault. Default: the gateway\'s resource group.')
param keyVaultResourceGroup string = ''

@description('Extra env vars from Key Vault: [{env, secretUri}], e.g. backend keys named by api_key_env.')
param keyVaultEnv array = []

@description('Whether the shared gateway\'s app exists (SERVICE_GATEWAY_RESOURCE_EXISTS, which azd sets before every provision): then every app keeps the image that app runs now. False: the placeholder until azd deploy.')
param gatewayExists bool = false

@description('An image every app runs, pinned (GATEWAY_IMAGE): one you built and pushed yourself, for subscriptions without ACR Tasks. Empty: the image the shared app runs, else the placeholder.')
param gatewayImage string = ''

@minValue(1)
@maxValue(300)
@description('Most replicas.')
param maxReplicas int = 10

@description('Concurrent requests (open streams included) per replica before another replica starts.')
param concurrentRequests int = 200

@description('vCPUs per replica. Consumption profile: memory must be twice this in Gi.')
param cpu string = '1.0'

@description('Memory per replica.')
param memory string = '2Gi'

@description('Add Azure Managed Redis for the shared rate-limit store.')
param enableRedis bool = false

@description('Azure Managed Redis SKU.')
param redisSku string = 'Balanced_B0'

@description('Where the Container Apps environment\'s managed OpenTelemetry agent sends every app\'s traces and metrics (GATEWAY_OTEL_DESTINATION): "appinsights" (an Application Insights resource made here, on the logs workspace; traces only, it takes no metrics), or the URL of an OTLP endpoint the agent exports to over gRPC (traces and metrics; http:// sends in clear). Empty: no agent, nothing exported, the environment as without this parameter.')
param otelDestination string = ''

@secure()
@description('Headers the agent sends to the OTLP endpoint, key=value,key=value (GATEWAY_OTEL_HEADERS): an api-key or Authorization. Empty: none.')
param otelHeaders string = ''

@description('Token scope of Azure OpenAI (GATEWAY_OPENAI_TOKEN_SCOPE). Empty: the scope of the cloud the deployment runs in, https://cognitiveservices.{azure.com, azure.us, azure.cn}/.default.')
param openAiTokenScope string = ''

@description('Token scope of Azure Managed Redis (GATEWAY_REDIS_TOKEN_SCOPE). Empty: https://redis.{azure.com, azure.us, azure.cn}/.default, by cloud.')
param redisTokenScope string = ''

// The DNS suffix of the cloud's data-plane token audiences, by the cloud this
// deployment runs in (environment().name); any other cloud takes the public
// one unless the two scopes above are set.
var cloudSuffixes = { AzureCloud: 'azure.com', AzureUSGovernment: 'azure.us', AzureChinaCloud: 'azure.cn' }
var cloudSuffix = contains(cloudSuffixes, environment().name) ? cloudSuffixes[environment().name] : 'azure.com'
var openAiScope = empty(openAiTokenScope) ? 'https://cognitiveservices.${cloudSuffix}/.default' : openAiTokenScope
var redisScope = empty(redisTokenScope) ? 'https://redis.${cloudSuffix}/.default' : redisTokenScope

// An isolated tenant: what GATEWAY_ISOLATED_TENANTS holds for each.
type isolatedTenant = {
  @description('The tenant\'s directory ID (the token\'s tid).')
  id: string
  @minLength(1)
  @maxLength(29)
  @description('Names its resources (ca-{name}, id-tenant-{name}-…) and its key prefix: isTenantName.')
  name: string
  @description('The public model names it may call.')
  models: string[]
  requests: int?
  interval: string?
  openAiAccountName: string?
  openAiResourceGroup: string?
  deployments: object?
}

// isTenantName is the tenant-name rule docs/azure.md states and
// scripts/bicepcheck evaluates: lowercase letters, digits and single
// hyphens, starting with a letter and ending with a letter or digit, 1 to
// 29 characters (its app, ca-{name}, is a Container App name: at most 32,
// no "--").
func isTenantName(n string) bool => length(n) >= 1 && length(n) <= 29 && contains('abcdefghijklmnopqrstuvwxyz', take(n, 1)) && !endsWith(n, '-') && !contains(n, '--') && empty(filter(range(0, length(n)), i => !contains('abcdefghijklmnopqrstuvwxyz0123456789-', substring(n, i, 1))))

// Every tenant name is checked before any resource of the gateway module
// exists: a bad or repeated name fails the deployment here, not when its
// app is created after its identity, role and Redis access.
var tenantNames = map(isolatedTenants, t => t.name)
var checkedTenants = length(union(tenantNames, [])) != length(tenantNames)
  ? fail('isolatedTenants: every name must be unique: ${join(tenantNames, ', ')}')
  : map(isolatedTenants, t => !isTenantName(t.name)
      ? fail('isolatedTenants: "${t.name}" is not a tenant name: lowercase letters, digits and single hyphens, starting with a letter, ending with a letter or digit, at most 29 characters')
      : !empty(missingDeployments(t, models))
          ? fail('isolatedTenants: "${t.name}" calls ${join(missingDeployments(t, models), ', ')}, which its deployments (default: the models parameter, GATEWAY_MODELS) do not map to an Azure deployment')
          : t)

// missingDeployments lists the models an isolated tenant calls that its
// deployments (default: the models parameter) do not name: each would fail
// the deployment with an ARM expression error in app.bicep, after the
// tenant's identity and Redis access exist, leaving them behind.
// scripts/bicepcheck evaluates it.
func missingDeployments(t object, defaults object) array => filter(t.models, m => !contains(contains(t, 'deployments') ? t.deployments : defaults, m))

// tenantRowProblem names the first field a shared-tier tenant row
// (GATEWAY_TENANTS) lacks, or ''. requests and
// interval may be left out (gateway.bicep's defaults); id and models may
// not. scripts/bicepcheck evaluates it.
func tenantRowProblem(t object) string => !contains(t, 'id') ? 'id' : !contains(t, 'models') ? 'models' : ''

var checkedTenantRows = map(tenants, t => empty(tenantRowProblem(t)) ? t : fail('tenants (GATEWAY_TENANTS): a row has no ${tenantRowProblem(t)}: ${string(t)}'))

// isOtelDestination is otelDestination's rule: empty, appinsights, or an
// http(s) URL (scripts/bicepcheck evaluates it).
func isOtelDestination(d string) bool => empty(d) || d == 'appinsights' || (startsWith(d, 'https://') && length(d) > 8) || (startsWith(d, 'http://') && length(d) > 7)

// An OTLP endpoint without a scheme (host:4317) is refused here, as the
// gateway refuses it in OTEL_EXPORTER_OTLP_ENDPOINT; an https endpoint
// without headers is refused by the agent, so it is refused here first,
// with the parameter named.
var checkedOtelDestination = !isOtelDestination(otelDestination)
  ? fail('otelDestination (GATEWAY_OTEL_DESTINATION): "${otelDestination}" is neither appinsights nor an http(s) URL of an OTLP endpoint (a scheme is required: https://host:4317)')
  : startsWith(otelDestination, 'https://') && empty(trim(otelHeaders))
      ? fail('otelHeaders (GATEWAY_OTEL_HEADERS): the agent takes an https OTLP endpoint only with headers: set its key, e.g. api-key=… or Authorization=Basic%20…')
      : otelDestination

var tags = { 'azd-env-name': environmentName }

resource rg 'Microsoft.Resources/resourceGroups@2024-03-01' = {
  name: 'rg-${environmentName}'
  location: location
  tags: tags
}

module gateway 'modules/gateway.bicep' = {
  name: 'gateway-${environmentName}'
  scope: rg
  params: {
    environmentName: environmentName
    location: location
    tags: tags
    openAiAccountName: openAiAccountName
    openAiResourceGroup: openAiResourceGroup
    models: models
    entraTenantId: entraTenantId
    apiClientId: apiClientId
    apiAppIdUri: apiAppIdUri
    tenants: checkedTenantRows
    isolatedTenants: checkedTenants
    requiredRoles: requiredRoles
    requiredScopes: requiredScopes
    gatewayConfig: gatewayConfig
    gatewayConfigKeyVaultSecretUri: gatewayConfigKeyVaultSecretUri
    keyVaultName: keyVaultName
    keyVaultResourceGroup: keyVaultResourceGroup
    keyVaultEnv: keyVaultEnv
    gatewayExists: gatewayExists
    gatewayImage: gatewayImage
    openAiTokenScope: openAiScope
    redisTokenScope: redisScope
    maxReplicas: maxReplicas
    concurrentRequests: concurrentRequests
    cpu: cpu
    memory: memory
    enableRedis: enableRedis
    redisSku: redisSku
    otelDestination: checkedOtelDestination
    otelHeaders: otelHeaders
  }
}

output AZURE_RESOURCE_GROUP string = rg.name
output AZURE_CONTAINER_REGISTRY_ENDPOINT string = gateway.outputs.registryLoginServer
output GATEWAY_IDENTITY_CLIENT_ID string = gateway.outputs.identityClientId
output GATEWAY_AUTH_ISSUER string = gateway.outputs.authIssuer
output GATEWAY_URL string = gateway.outputs.url
// The isolated tenants' apps: names for the postdeploy hook (space
// separated), and each tenant's URL.
output GATEWAY_TENANT_APPS string = join(gateway.outputs.tenantAppNames, ' ')
output GATEWAY_TENANT_URLS array = gateway.outputs.tenantUrls
