// Everything the gateways need in their resource group. Shared, once: logs,
// the Container Apps environment, a registry for azd to push to with one
// pull identity and its AcrPull grant, and optional Azure Managed Redis (the
// shared store). Per app: a user-assigned identity (the one Azure OpenAI,
// Key Vault and Redis see for that app), its Redis access, and the app with
// its role assignments and config (app.bicep). The apps are the shared
// gateway (the tenant table) and one per isolated tenant.

param environmentName string
param location string
param tags object
param openAiAccountName string
param openAiResourceGroup string
param models object
param entraTenantId string
param apiClientId string
param apiAppIdUri string
param tenants array
param isolatedTenants array
param requiredRoles array
param requiredScopes array
@secure()
param gatewayConfig string
param gatewayConfigKeyVaultSecretUri string
param keyVaultName string
param keyVaultResourceGroup string
param keyVaultEnv array
param gatewayExists bool
param gatewayImage string
param openAiTokenScope string
param redisTokenScope string
param maxReplicas int
param concurrentRequests int
param cpu string
param memory string
param enableRedis bool
param redisSku string
@description('The managed OpenTelemetry agent\'s destination: empty (none), appinsights, or an OTLP endpoint URL (main.bicep checked it).')
param otelDestination string
@secure()
param otelHeaders string

var token = toLower(uniqueString(subscription().id, resourceGroup().id, environmentName))

resource logs 'Microsoft.OperationalInsights/workspaces@2023-09-01' = {
  name: 'log-${token}'
  location: location
  tags: tags
  properties: {
    sku: { name: 'PerGB2018' }
    retentionInDays: 30
  }
}

// The environment's managed OpenTelemetry agent, on when
// otelDestination is set. Container Apps then gives every app the agent's
// address (OTEL_EXPORTER_OTLP_ENDPOINT, and OTEL_EXPORTER_OTLP_PROTOCOL=grpc,
// the one protocol the agent takes), which the gateway reads like any
// collector's; the agent forwards to the destination. Application Insights
// takes traces only (no metrics): its apps export no metrics (app.bicep).
// openTelemetryConfiguration is in the preview API versions only, hence
// the environment's.
var otelOn = !empty(otelDestination)
var otelAppInsights = otelDestination == 'appinsights'

// otlpHeaders reads a key=value,key=value list as the gateway reads
// OTEL_EXPORTER_OTLP_HEADERS (shared/telemetry/otlp): keys trimmed, values
// trimmed and percent-decoded (Authorization=Basic%20… reaches the endpoint
// as "Basic …"), and an entry without '=', with an empty key or with a bad
// percent-escape dropped. scripts/bicepcheck/testdata/otlp-headers.json
// holds the cases both parsers are tested on, so that they cannot drift
// apart.
func otlpHeaders(headers string) array => map(filter(map(filter(split(headers, ','), kv => contains(kv, '=') && !empty(trim(substring(kv, 0, indexOf(kv, '='))))), kv => { key: trim(substring(kv, 0, indexOf(kv, '='))), value: trim(substring(kv, indexOf(kv, '=') + 1)) }), h => isPercentEncoded(h.value)), h => { key: h.key, value: uriComponentToString(h.value) })

// isPercentEncoded reports whether every '%' in v starts an escape of two
// hex digits (v is padded so that no substring runs past its end).
func isPercentEncoded(v string) bool => empty(filter(range(0, length(v)), i => substring(v, i, 1) == '%' && (!contains('0123456789abcdefABCDEF', substring('${v}..', i + 1, 1)) || !contains('0123456789abcdefABCDEF', substring('${v}..', i + 2, 1)))))

// otelAgent is the agent's openTelemetryConfiguration for a destination
// and its headers (key=value,key=value as OTEL_EXPORTER_OTLP_HEADERS):
// traces to Application Insights, or traces and metrics to one OTLP
// endpoint, in clear only for an http:// URL. scripts/bicepcheck
// evaluates it.
func otelAgent(destination string, headers string) object => destination == 'appinsights'
  ? { tracesConfiguration: { destinations: ['appInsights'] } }
  : {
      destinationsConfiguration: {
        otlpConfigurations: [
          {
            name: 'otlp'
            endpoint: destination
            insecure: startsWith(destination, 'http://')
            headers: otlpHeaders(headers)
          }
        ]
      }
      tracesConfiguration: { destinations: ['otlp'] }
      metricsConfiguration: { destinations: ['otlp'] }
    }

resource appInsights 'Microsoft.Insights/components@2020-02-02' = if (otelAppInsights) {
  name: 'appi-${token}'
  location: location
  tags: tags
  kind: 'web'
  properties: {
    Application_Type: 'web'
    WorkspaceResourceId: logs.id
  }
}

resource env 'Microsoft.App/managedEnvironments@2024-10-02-preview' = {
  name: 'cae-${token}'
  location: location
  tags: tags
  properties: {
    appLogsConfiguration: {
      destination: 'log-analytics'
      logAnalyticsConfiguration: {
        customerId: logs.properties.customerId
        sharedKey: logs.listKeys().primarySharedKey
      }
    }
    appInsightsConfiguration: otelAppInsights ? { connectionString: appInsights.properties.ConnectionString } : null
    openTelemetryConfiguration: otelOn ? otelAgent(otelDestination, otelHeaders) : null
    workloadProfiles: [
      { name: 'Consumption', workloadProfileType: 'Consumption' }
    ]
  }
}

resource registry 'Microsoft.ContainerRegistry/registries@2023-07-01' = {
  name: 'cr${token}'
  location: location
  tags: tags
  sku: { name: 'Basic' }
  properties: { adminUserEnabled: false }
}

// Every app pulls the one image with this identity, whose AcrPull grant is
// made once, with the registry: an app added later (a new tenant) pulls
// with a grant that has long propagated, instead of racing a grant made in
// the same deployment. On the first deployment every app runs
// the public placeholder, so nothing pulls from the registry until azd
// deploy, minutes later.
resource pullIdentity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: 'id-pull-${token}'
  location: location
  tags: tags
}

// Built-in role IDs (the same in every tenant).
var acrPullRoleId = '7f951dda-4ed3-4680-a7ca-43fe172d538d'

resource acrPull 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(registry.id, pullIdentity.id, acrPullRoleId)
  scope: registry
  properties: {
    principalId: pullIdentity.properties.principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', acrPullRoleId)
  }
}

// The image every app runs: the one pinned by GATEWAY_IMAGE; else, when the
// shared app exists (azd's SERVICE_GATEWAY_RESOURCE_EXISTS, set before each
// provision), the image it runs now, so that a provision from CI, another
// machine or a fresh azd environment keeps every app where azd deploy and
// its hook put them; else the placeholder (a first deploy, or after azd
// down, when the old registry and its images are gone). scripts/azconfig
// simulates azd's parameter flow on these lines: keep them on this form.
module liveImage 'live-image.bicep' = {
  name: 'live-image-${token}'
  params: {
    exists: gatewayExists
    appName: sharedAppName
  }
}
var image = !empty(gatewayImage) ? gatewayImage : liveImage.outputs.image

// Azure Managed Redis (Microsoft.Cache/redisEnterprise; Azure Cache for
// Redis is being retired) for the shared rate-limit store. Access keys are
// off: each app's identity logs in with Microsoft Entra ID
// (store.redis_entra). EnterpriseCluster: one endpoint for a client that is
// not cluster-aware.
resource redis 'Microsoft.Cache/redisEnterprise@2025-04-01' = if (enableRedis) {
  name: 'redis-${token}'
  location: location
  tags: tags
  sku: { name: redisSku }
  properties: {
    minimumTlsVersion: '1.2'
  }
}

resource redisDb 'Microsoft.Cache/redisEnterprise/databases@2025-04-01' = if (enableRedis) {
  parent: redis
  name: 'default'
  properties: {
    clientProtocol: 'Encrypted'
    port: 10000
    clusteringPolicy: 'EnterpriseCluster'
    evictionPolicy: 'NoEviction'
    accessKeysAuthentication: 'Disabled'
  }
}

// No key in the URL: each app logs in as its own identity.
var redisUrl = enableRedis ? 'rediss://${redis.properties.hostName}:${redisDb.properties.port}' : ''

// What every app's config shares: Entra ID v2.0 tokens of any directory
// (the issuer with {tenantid}, Entra's multi-tenant form, checked against
// the token's tid; the common keys, which sign every directory's tokens)
// for the API's app registration. Which directories an app serves is its
// tenant table's decision. scripts/azconfig mirrors these vars: keep each on
// the form its test expects.
var authIssuer = '${environment().authentication.loginEndpoint}{tenantid}/v2.0'
var authJwksUrl = '${environment().authentication.loginEndpoint}common/discovery/v2.0/keys'
var authAudiences = [apiClientId, empty(apiAppIdUri) ? 'api://${apiClientId}' : apiAppIdUri]

// The shared gateway's tenant table. A tenant is the token's tid: an Entra
// directory. Without a table, the API's own directory may call every model,
// 600 requests a minute. A row's name is logged as tenant_name; a row
// without requests or interval gets the isolated tier's defaults (600 a
// minute), as its description says (main.bicep checked id and models).
var tenantTable = empty(tenants)
  ? [{ id: entraTenantId, name: 'home', models: map(items(models), m => m.key), requests: 600, interval: '1m' }]
  : tenants
var tenantRows = map(tenantTable, t => { id: t.id, name: contains(t, 'name') ? t.name : '', models: t.models, requests: contains(t, 'requests') ? t.requests : 600, interval: contains(t, 'interval') ? t.interval : '1m' })

// The isolated tenants: one app each, pinned to its directory (a one-row
// table), with its own identity, its own role on the account it calls
// (default the shared one), and its own key prefix in the shared store.
// Everything is keyed by the tenant's name, never by its position, so
// adding or removing one changes no other tenant's resources.
var isolated = map(isolatedTenants, t => union({ requests: 600, interval: '1m', openAiAccountName: openAiAccountName, openAiResourceGroup: openAiResourceGroup, deployments: models }, t))
var isolatedAppNames = map(isolated, t => 'ca-${t.name}')
var sharedAppName = 'ca-gateway-${token}'

// One identity per app, made here so that Redis access (below) exists
// before the app that logs in with it starts.
resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: 'id-gateway-${token}'
  location: location
  tags: tags
}

// Key Vault Secrets User for the shared gateway's identity (the only app
// that reads Key Vault: its config or extra env vars), granted as soon as
// the identity exists and before any app module starts, as the pull grant
// is: an app created right after its grant fails its first revision with
// "unable to fetch secret" while the grant propagates
// (microsoft/azure-container-apps#722, #930, #1174). A module skipped as a
// whole when no vault is named, so nothing in it is evaluated with an
// empty name.
module keyVaultAccess 'keyvault-access.bicep' = if (!empty(keyVaultName)) {
  name: 'keyvault-access-${token}-${sharedAppName}'
  scope: resourceGroup(empty(keyVaultResourceGroup) ? resourceGroup().name : keyVaultResourceGroup)
  params: {
    vaultName: keyVaultName
    principalId: identity.properties.principalId
  }
}

resource tenantIdentities 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = [for t in isolated: {
  name: 'id-tenant-${t.name}-${token}'
  location: location
  tags: union(tags, { 'gateway-tenant': t.name })
}]

// Entra data access to the shared store for each identity: the gateway logs
// in with the identity's object id as the username and its Entra token as
// the password, and sends AUTH again on open connections before the token
// expires. One at a time: the database takes one change at once.
resource redisAccess 'Microsoft.Cache/redisEnterprise/databases/accessPolicyAssignments@2025-04-01' = if (enableRedis) {
  parent: redisDb
  name: 'gateway'
  properties: {
    accessPolicyName: 'default'
    user: { objectId: identity.properties.principalId }
  }
}

@batchSize(1)
resource tenantRedisAccess 'Microsoft.Cache/redisEnterprise/databases/accessPolicyAssignments@2025-04-01' = [for (t, i) in isolated: if (enableRedis) {
  parent: redisDb
  name: 'tenant${uniqueString(t.name)}'
  dependsOn: [redisAccess]
  properties: {
    accessPolicyName: 'default'
    user: { objectId: tenantIdentities[i].properties.principalId }
  }
}]

// The shared gateway: the tenant table, the azd service's app.
module app 'app.bicep' = {
  name: 'app-${token}'
  dependsOn: [redisAccess, acrPull, keyVaultAccess]
  params: {
    token: token
    location: location
    tags: union(tags, { 'azd-service-name': 'gateway' })
    appName: sharedAppName
    identityName: identity.name
    environmentId: env.id
    registryName: registry.name
    image: image
    pullIdentityName: pullIdentity.name
    cpu: cpu
    memory: memory
    maxReplicas: maxReplicas
    concurrentRequests: concurrentRequests
    openAiAccountName: openAiAccountName
    openAiResourceGroup: openAiResourceGroup
    authIssuer: authIssuer
    authJwksUrl: authJwksUrl
    authAudiences: authAudiences
    requiredRoles: requiredRoles
    requiredScopes: requiredScopes
    tenantRows: tenantRows
    models: models
    enableRedis: enableRedis
    redisUrl: redisUrl
    openAiTokenScope: openAiTokenScope
    redisTokenScope: redisTokenScope
    otelDestination: otelDestination
    keyPrefix: 'llmgw:'
    gatewayConfig: gatewayConfig
    gatewayConfigKeyVaultSecretUri: gatewayConfigKeyVaultSecretUri
    keyVaultEnv: keyVaultEnv
  }
}

// One app per isolated tenant: the same module, image, environment,
// registry and store; its own name, identity, account role, table row,
// models and key prefix. No azd-service-name tag: azd deploy updates the
// shared app, and the postdeploy hook (scripts/azd) moves these apps to the
// image it deployed; a later provision keeps them on the shared app's image.
module tenantApps 'app.bicep' = [for (t, i) in isolated: {
  name: 'tenant-${token}-${t.name}'
  dependsOn: [tenantRedisAccess, acrPull]
  params: {
    token: token
    location: location
    tags: union(tags, { 'gateway-tenant': t.name })
    appName: isolatedAppNames[i]
    identityName: tenantIdentities[i].name
    environmentId: env.id
    registryName: registry.name
    image: image
    pullIdentityName: pullIdentity.name
    cpu: cpu
    memory: memory
    maxReplicas: maxReplicas
    concurrentRequests: concurrentRequests
    openAiAccountName: t.openAiAccountName
    openAiResourceGroup: t.openAiResourceGroup
    authIssuer: authIssuer
    authJwksUrl: authJwksUrl
    authAudiences: authAudiences
    requiredRoles: requiredRoles
    requiredScopes: requiredScopes
    tenantRows: [{ id: t.id, name: t.name, models: t.models, requests: t.requests, interval: t.interval }]
    models: t.deployments
    modelNames: t.models
    enableRedis: enableRedis
    redisUrl: redisUrl
    openAiTokenScope: openAiTokenScope
    redisTokenScope: redisTokenScope
    otelDestination: otelDestination
    keyPrefix: 'llmgw:${t.name}:'
  }
}]

output url string = app.outputs.url
output identityClientId string = identity.properties.clientId
output identityPrincipalId string = identity.properties.principalId
output registryLoginServer string = registry.properties.loginServer
output authIssuer string = authIssuer
output tenantAppNames array = isolatedAppNames
output tenantUrls array = [for (t, i) in isolated: { name: t.name, url: tenantApps[i].outputs.url }]
