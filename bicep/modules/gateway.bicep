// Everything the gateway needs in its resource group: logs, the Container
// Apps environment, one user-assigned identity (the only identity the app
// uses: Azure OpenAI, the registry, Key Vault and Redis all see the same
// principal), a registry for azd to push to, optional Redis, and the app.

param environmentName string
param location string
param tags object
param openAiAccountName string
param openAiResourceGroup string
param models object
param authIssuer string
param authAudiences array
param tenants array
@secure()
param gatewayConfig string
param gatewayConfigKeyVaultSecretUri string
param keyVaultName string
param keyVaultEnv array
param gatewayImage string
param maxReplicas int
param concurrentRequests int
param cpu string
param memory string
param enableRedis bool

// The port the image exposes (scripts/image: ExposedPorts 8080/tcp, PORT=8080)
// and the path of the gateway's health route.
var port = 8080
var healthPath = '/healthz'
var configDir = '/etc/gateway'
var configFile = 'gateway.yaml'
var token = toLower(uniqueString(subscription().id, resourceGroup().id, environmentName))

// Built-in role IDs (the same in every tenant).
var acrPullRoleId = '7f951dda-4ed3-4680-a7ca-43fe172d538d'
var keyVaultSecretsUserRoleId = '4633458b-17de-408a-b874-0445c86b69e6'

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

resource vault 'Microsoft.KeyVault/vaults@2023-07-01' existing = if (!empty(keyVaultName)) {
  name: keyVaultName
}

resource vaultSecretsUser 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(keyVaultName)) {
  name: guid(resourceGroup().id, keyVaultName, identity.id, keyVaultSecretsUserRoleId)
  scope: vault
  properties: {
    principalId: identity.properties.principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', keyVaultSecretsUserRoleId)
  }
}

// Keyless Azure OpenAI: the identity gets Cognitive Services OpenAI User on
// the existing account, wherever its resource group is.
module openAiAccess 'openai-access.bicep' = {
  name: 'openai-access'
  scope: resourceGroup(openAiResourceGroup)
  params: {
    accountName: openAiAccountName
    principalId: identity.properties.principalId
  }
}

resource redis 'Microsoft.Cache/redis@2024-03-01' = if (enableRedis) {
  name: 'redis-${token}'
  location: location
  tags: tags
  properties: {
    sku: { name: 'Basic', family: 'C', capacity: 0 }
    enableNonSslPort: false
    minimumTlsVersion: '1.2'
    redisConfiguration: { 'aad-enabled': 'true' }
  }
}

// Entra data access for the same identity: the gateway logs in to Redis
// with the identity's object id as the username and its Entra token as the
// password (limiter.redis_entra), so no access key is used. Data
// Contributor allows the limiter's Lua scripts and no admin commands.
resource redisAccess 'Microsoft.Cache/redis/accessPolicyAssignments@2024-03-01' = if (enableRedis) {
  parent: redis
  name: 'gateway'
  properties: {
    accessPolicyName: 'Data Contributor'
    objectId: identity.properties.principalId
    objectIdAlias: 'gateway'
  }
}

// The config the gateway reads when none is given: the Azure OpenAI account
// as one entra-authenticated pool, called as this identity.
var generatedConfig = {
  listen: ':${port}'
  auth: {
    issuer: authIssuer
    audiences: authAudiences
  }
  limiter: enableRedis
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
  // One tenant allowed every model unless a table is given.
  tenants: empty(tenants)
    ? [{ id: 'default', models: map(items(models), m => m.key), requests: 600, interval: '1m' }]
    : tenants
  pools: [
    {
      name: 'azure-openai'
      kind: 'azure-openai'
      models: models
      endpoints: [
        {
          url: openAiAccess.outputs.endpoint
          auth: 'entra'
          entra: {
            credential: 'managed-identity'
            client_id: identity.properties.clientId
          }
        }
      ]
    }
  ]
}

// The config reaches the container as a file in a secret volume: from Key
// Vault when a secret URI is given, else the gatewayConfig parameter, else
// the generated config (JSON is YAML).
var configSecret = empty(gatewayConfigKeyVaultSecretUri)
  ? { name: 'gateway-config', value: empty(gatewayConfig) ? string(generatedConfig) : gatewayConfig }
  : { name: 'gateway-config', keyVaultUrl: gatewayConfigKeyVaultSecretUri, identity: identity.id }

// No key in the URL: the login is the identity's Entra token.
var redisSecrets = enableRedis
  ? [{ name: 'redis-url', value: 'rediss://${redis.properties.hostName}:${redis.properties.sslPort}' }]
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
  dependsOn: [acrPull, vaultSecretsUser, openAiAccess, redisAccess]
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
          image: gatewayImage
          resources: {
            cpu: json(cpu)
            memory: memory
          }
          env: concat([
            { name: 'GATEWAY_CONFIG', value: '${configDir}/${configFile}' }
            // Container Apps sets CONTAINER_APP_PORT, not PORT; the image sets
            // PORT too, this keeps an image built another way (ko) right.
            { name: 'PORT', value: string(port) }
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
