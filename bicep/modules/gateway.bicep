// Everything the gateway needs in its resource group: logs, the Container
// Apps environment, one user-assigned identity (the only identity the app
// uses: Azure OpenAI, the registry, Key Vault and Redis all see the same
// principal), a registry for azd to push to, optional Azure Managed Redis,
// and the app.

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
@secure()
param gatewayConfig string
param gatewayConfigKeyVaultSecretUri string
param keyVaultName string
param keyVaultResourceGroup string
param keyVaultEnv array
param gatewayImageName string
param maxReplicas int
param concurrentRequests int
param cpu string
param memory string
param enableRedis bool
param redisSku string

// The port the image exposes (scripts/image: ExposedPorts 8080/tcp, PORT=8080)
// and the path of the gateway's health route.
var port = 8080
var healthPath = '/healthz'
var configDir = '/etc/gateway'
var configFile = 'gateway.yaml'
var token = toLower(uniqueString(subscription().id, resourceGroup().id, environmentName))

// Until `azd deploy` has pushed the gateway image (azd then sets
// SERVICE_GATEWAY_IMAGE_NAME, which main.parameters.json feeds back so that
// a later `azd provision` keeps it), the app runs a placeholder. It must pass
// the same probes on the same port: `azd deploy` swaps only the image, never
// the target port or the probes. The .NET sample listens on 8080 and serves
// GET /healthz.
var placeholderImage = 'mcr.microsoft.com/dotnet/samples:aspnetapp'
var image = empty(gatewayImageName) ? placeholderImage : gatewayImageName

// Built-in role IDs (the same in every tenant).
var acrPullRoleId = '7f951dda-4ed3-4680-a7ca-43fe172d538d'

resource logs 'Microsoft.OperationalInsights/workspaces@2023-09-01' = {
  name: 'log-${token}'
  location: location
  tags: tags
  properties: {
    sku: { name: 'PerGB2018' }
    retentionInDays: 30
  }
}

resource env 'Microsoft.App/managedEnvironments@2024-03-01' = {
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
    workloadProfiles: [
      { name: 'Consumption', workloadProfileType: 'Consumption' }
    ]
  }
}

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: 'id-gateway-${token}'
  location: location
  tags: tags
}

resource registry 'Microsoft.ContainerRegistry/registries@2023-07-01' = {
  name: 'cr${token}'
  location: location
  tags: tags
  sku: { name: 'Basic' }
  properties: { adminUserEnabled: false }
}

resource acrPull 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(registry.id, identity.id, acrPullRoleId)
  scope: registry
  properties: {
    principalId: identity.properties.principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', acrPullRoleId)
  }
}

// Key Vault Secrets User on an existing vault, as a module that is skipped
// as a whole when no vault is named: nothing inside it (the vault reference,
// the role assignment's scope) is evaluated with an empty name. Deployment
// names carry the token, unique per environment.
module keyVaultAccess 'keyvault-access.bicep' = if (!empty(keyVaultName)) {
  name: 'keyvault-access-${token}'
  scope: resourceGroup(empty(keyVaultResourceGroup) ? resourceGroup().name : keyVaultResourceGroup)
  params: {
    vaultName: keyVaultName
    principalId: identity.properties.principalId
  }
}

// Keyless Azure OpenAI: the identity gets Cognitive Services OpenAI User on
// the existing account, in its own resource group. The deployment lands in
// that group, which several environments may share: its name is unique per
// environment.
module openAiAccess 'openai-access.bicep' = {
  name: 'openai-access-${token}'
  scope: resourceGroup(openAiResourceGroup)
  params: {
    accountName: openAiAccountName
    principalId: identity.properties.principalId
  }
}

// Azure Managed Redis (Microsoft.Cache/redisEnterprise; Azure Cache for
// Redis is being retired) for the shared rate-limit store. Access keys are
// off: the identity logs in with Microsoft Entra ID (limiter.redis_entra).
// EnterpriseCluster: one endpoint for a client that is not cluster-aware.
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

// Entra data access for the same identity: the gateway logs in with the
// identity's object id as the username and its Entra token as the password,
// and sends AUTH again on open connections before the token expires.
resource redisAccess 'Microsoft.Cache/redisEnterprise/databases/accessPolicyAssignments@2025-04-01' = if (enableRedis) {
  parent: redisDb
  name: 'gateway'
  properties: {
    accessPolicyName: 'default'
    user: { objectId: identity.properties.principalId }
  }
}

// The generated config: gateway-config.json with its placeholders filled by
// the replace() calls of configWithText and generatedConfig. A placeholder
// replaced without its quotes takes text inside a JSON string; one replaced
// with its quotes takes the JSON of an array or object (string()).
// scripts/azconfig reads these two lines and the vars they use, fills the
// same file the same way, and runs the gateway on the result: keep each var
// on the form its test expects.
var authIssuer = '${environment().authentication.loginEndpoint}${entraTenantId}/v2.0'
var authAudiences = [apiClientId, empty(apiAppIdUri) ? 'api://${apiClientId}' : apiAppIdUri]
// The tenant is the token's tid: an Entra directory. Without a table, the
// API's own directory may call every model, 600 requests a minute. A row's
// name is for people reading the parameters; the config has no field for it.
var tenantTable = empty(tenants)
  ? [{ id: entraTenantId, name: 'home', models: map(items(models), m => m.key), requests: 600, interval: '1m' }]
  : tenants
var tenantRows = map(tenantTable, t => { id: t.id, models: t.models, requests: t.requests, interval: t.interval })
var limiter = enableRedis
  ? {
      store: 'redis'
      redis_url_env: 'REDIS_URL'
      redis_entra: {
        credential: 'managed-identity'
        client_id: identity.properties.clientId
        username: identity.properties.principalId
      }
    }
  : { store: 'memory' }
var configWithText = replace(replace(replace(loadTextContent('gateway-config.json'), '__AUTH_ISSUER__', authIssuer), '__OPENAI_ENDPOINT__', openAiAccess.outputs.endpoint), '__IDENTITY_CLIENT_ID__', identity.properties.clientId)
var generatedConfig = replace(replace(replace(replace(configWithText, '"__AUTH_AUDIENCES__"', string(authAudiences)), '"__LIMITER__"', string(limiter)), '"__TENANTS__"', string(tenantRows)), '"__MODELS__"', string(models))

// The config reaches the container as a file in a secret volume: from Key
// Vault when a secret URI is given, else the gatewayConfig parameter, else
// the generated config (JSON is YAML).
var configSecret = empty(gatewayConfigKeyVaultSecretUri)
  ? { name: 'gateway-config', value: empty(gatewayConfig) ? generatedConfig : gatewayConfig }
  : { name: 'gateway-config', keyVaultUrl: gatewayConfigKeyVaultSecretUri, identity: identity.id }

// No key in the URL: the login is the identity's Entra token.
var redisSecrets = enableRedis
  ? [{ name: 'redis-url', value: 'rediss://${redis.properties.hostName}:${redisDb.properties.port}' }]
  : []
var redisEnv = enableRedis ? [{ name: 'REDIS_URL', secretRef: 'redis-url' }] : []

var vaultSecrets = [for (e, i) in keyVaultEnv: { name: 'kv-${i}', keyVaultUrl: e.secretUri, identity: identity.id }]
var vaultEnv = [for (e, i) in keyVaultEnv: { name: e.env, secretRef: 'kv-${i}' }]

resource app 'Microsoft.App/containerApps@2024-03-01' = {
  name: 'ca-gateway-${token}'
  location: location
  tags: union(tags, { 'azd-service-name': 'gateway' })
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: { '${identity.id}': {} }
  }
  dependsOn: [acrPull, keyVaultAccess, openAiAccess, redisAccess]
  properties: {
    environmentId: env.id
    workloadProfileName: 'Consumption'
    configuration: {
      activeRevisionsMode: 'Single'
      // transport http: HTTP/1.1 to the container, which is what the gateway
      // serves; SSE streams as chunked HTTP/1.1 and the ingress passes each
      // event on as it comes. http2 would need h2c in the container; auto
      // would only add protocol detection. Clients may still use HTTP/2 to
      // the ingress.
      ingress: {
        external: true
        targetPort: port
        transport: 'http'
        allowInsecure: false
      }
      registries: [
        { server: registry.properties.loginServer, identity: identity.id }
      ]
      secrets: concat([configSecret], redisSecrets, vaultSecrets)
    }
    template: {
      containers: [
        {
          name: 'gateway'
          image: image
          resources: {
            cpu: json(cpu)
            memory: memory
          }
          // No PORT here: the image sets PORT=8080, and without it the
          // gateway listens on CONTAINER_APP_PORT, which Container Apps sets
          // to the ingress target port.
          env: concat([
            { name: 'GATEWAY_CONFIG', value: '${configDir}/${configFile}' }
            { name: 'AZURE_CLIENT_ID', value: identity.properties.clientId }
          ], redisEnv, vaultEnv)
          volumeMounts: [
            { volumeName: 'config', mountPath: configDir }
          ]
          probes: [
            {
              type: 'Startup'
              httpGet: { path: healthPath, port: port }
              periodSeconds: 1
              failureThreshold: 30
              timeoutSeconds: 1
            }
            {
              type: 'Readiness'
              httpGet: { path: healthPath, port: port }
              periodSeconds: 5
              failureThreshold: 3
              timeoutSeconds: 2
            }
            {
              type: 'Liveness'
              httpGet: { path: healthPath, port: port }
              periodSeconds: 10
              failureThreshold: 3
              timeoutSeconds: 2
            }
          ]
        }
      ]
      volumes: [
        {
          name: 'config'
          storageType: 'Secret'
          secrets: [{ secretRef: 'gateway-config', path: configFile }]
        }
      ]
      scale: {
        minReplicas: 0
        maxReplicas: maxReplicas
        rules: [
          {
            name: 'http-concurrency'
            http: { metadata: { concurrentRequests: string(concurrentRequests) } }
          }
        ]
      }
    }
  }
}

output url string = 'https://${app.properties.configuration.ingress.fqdn}'
output identityClientId string = identity.properties.clientId
output identityPrincipalId string = identity.properties.principalId
output registryLoginServer string = registry.properties.loginServer
output authIssuer string = authIssuer
