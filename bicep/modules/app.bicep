// One gateway Container App and what only it uses: its role assignment
// (Cognitive Services OpenAI User on the account its config calls), its
// config and the app itself,
// running as the user-assigned identity gateway.bicep made for it. It pulls
// its image with the shared pull identity, whose AcrPull grant gateway.bicep
// made once. gateway.bicep deploys this module once for the shared gateway (the
// tenant table) and once per isolated tenant, with the same image, in the
// same environment: the app's config, identity and role assignments are
// its own, nothing else is.

@description('Unique per azd environment (gateway.bicep\'s token); names nested deployments.')
param token string
param location string
param tags object

@maxLength(32)
@description('Container App name.')
param appName string

@description('The existing user-assigned identity the app runs as; only this app uses it.')
param identityName string

param environmentId string
param registryName string

@description('The image to run (the same for every app), or empty for the placeholder.')
param image string

@description('The shared identity every app pulls the image with (AcrPull on the registry, granted once by gateway.bicep).')
param pullIdentityName string
param cpu string
param memory string
param maxReplicas int
param concurrentRequests int

@description('The Azure OpenAI account this app calls, and its resource group: its identity gets its role there and nowhere else.')
param openAiAccountName string
param openAiResourceGroup string

// The generated config's inputs (see generatedConfig below).
param authIssuer string
param authJwksUrl string
param authAudiences array
param requiredRoles array
param requiredScopes array
@description('The tenant table: [{id, name, models, requests, interval}].')
param tenantRows array
@description('Public model name → deployment name on the account.')
param models object
@description('The public model names this app\'s pool serves, each a key of models. Empty: all of models.')
param modelNames array = []
param enableRedis bool
@description('rediss://host:port of the shared store (no key); empty without Redis.')
param redisUrl string
@description('store.key_prefix: the app\'s namespace in the shared store.')
param keyPrefix string
@description('The token scopes of Azure OpenAI and Azure Managed Redis in this cloud.')
param openAiTokenScope string
param redisTokenScope string
@description('The environment\'s OpenTelemetry agent destination (gateway.bicep): empty, appinsights, or an OTLP endpoint.')
param otelDestination string

@secure()
@description('A complete gateway config instead of the generated one (shared gateway only).')
param gatewayConfig string = ''
param gatewayConfigKeyVaultSecretUri string = ''
@description('Key Vault references for extra env vars: [{env, secretUri}]. The identity\'s Key Vault Secrets User grant is gateway.bicep\'s, made before any app.')
param keyVaultEnv array = []

// The port the image exposes (scripts/image: ExposedPorts 8080/tcp, PORT=8080)
// and the path of the gateway's health route.
var port = 8080
var healthPath = '/healthz'
// The readiness probe asks /healthz the readiness question (the issuer's
// keys fetched once) with this header (server.ReadinessProbeHeader in the
// gateway); an image that serves only /healthz ignores it.
var readinessHeaders = [ { name: 'X-Llmgw-Probe', value: 'readiness' } ]
var configDir = '/etc/gateway'
var configFile = 'gateway.yaml'

// Until `azd deploy` has pushed the gateway image (gateway.bicep then reads
// the image the shared app runs, so that a later `azd provision` keeps it),
// the app runs a placeholder. It must pass the same probes on the same
// port: `azd deploy` swaps only the image, never the target port or the
// probes. The .NET sample listens on 8080 and serves GET /healthz.
var placeholderImage = 'mcr.microsoft.com/dotnet/samples:aspnetapp'
var containerImage = empty(image) ? placeholderImage : image

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' existing = {
  name: identityName
}

resource pullIdentity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' existing = {
  name: pullIdentityName
}

resource registry 'Microsoft.ContainerRegistry/registries@2023-07-01' existing = {
  name: registryName
}

// Keyless Azure OpenAI: this app's identity gets Cognitive Services OpenAI
// User on the one account its config calls (the account is the finest scope
// Azure documents for the role), in that account's resource group, which
// several environments may share: the deployment name is unique per
// environment and app. The config's endpoint is this module's output, so
// the role and the config name the same account.
module openAiAccess 'openai-access.bicep' = {
  name: 'openai-access-${token}-${appName}'
  scope: resourceGroup(openAiResourceGroup)
  params: {
    accountName: openAiAccountName
    principalId: identity.properties.principalId
  }
}

// The generated config: gateway-config.json with its placeholders filled by
// the replace() calls of configWithText and generatedConfig. A placeholder
// replaced without its quotes takes text inside a JSON string; one replaced
// with its quotes takes the JSON of an array or object (string()).
// scripts/azconfig reads these two lines and the vars and parameters they
// use, fills the same file the same way, and runs the gateway on the result:
// keep each var on the form its test expects.
var sharedStore = enableRedis
  ? {
      backend: 'redis'
      redis_url_env: 'REDIS_URL'
      key_prefix: keyPrefix
      redis_entra: {
        credential: 'managed-identity'
        client_id: identity.properties.clientId
        username: identity.properties.principalId
        scope: redisTokenScope
      }
    }
  : { backend: 'memory', key_prefix: keyPrefix }
var poolModels = empty(modelNames) ? models : toObject(modelNames, m => m, m => models[m])
var configWithText = replace(replace(replace(replace(replace(loadTextContent('gateway-config.json'), '__AUTH_ISSUER__', authIssuer), '__AUTH_JWKS_URL__', authJwksUrl), '__OPENAI_ENDPOINT__', openAiAccess.outputs.endpoint), '__IDENTITY_CLIENT_ID__', identity.properties.clientId), '__OPENAI_TOKEN_SCOPE__', openAiTokenScope)
var generatedConfig = replace(replace(replace(replace(replace(replace(configWithText, '"__AUTH_AUDIENCES__"', string(authAudiences)), '"__REQUIRED_ROLES__"', string(requiredRoles)), '"__REQUIRED_SCOPES__"', string(requiredScopes)), '"__STORE__"', string(sharedStore)), '"__TENANTS__"', string(tenantRows)), '"__MODELS__"', string(poolModels))

// The config reaches the container as a file in a secret volume: from Key
// Vault when a secret URI is given, else the gatewayConfig parameter, else
// the generated config (JSON is YAML).
var configSecret = empty(gatewayConfigKeyVaultSecretUri)
  ? { name: 'gateway-config', value: empty(gatewayConfig) ? generatedConfig : gatewayConfig }
  : { name: 'gateway-config', keyVaultUrl: gatewayConfigKeyVaultSecretUri, identity: identity.id }

// No key in the URL: the login is the identity's Entra token.
var redisSecrets = enableRedis ? [{ name: 'redis-url', value: redisUrl }] : []
var redisEnv = enableRedis ? [{ name: 'REDIS_URL', secretRef: 'redis-url' }] : []

// With the environment's OpenTelemetry agent on, Container Apps sets the
// exporter's endpoint and protocol; the app names itself (service.name, so
// the shared gateway and each tenant's are told apart), records one trace
// in ten (a recorded trace costs a request about ten times what its
// metrics do; the gateway's own default, the specification's, records
// every trace), and exports no metrics to an Application Insights agent,
// which takes none. Off: nothing.
var otelEnv = empty(otelDestination)
  ? []
  : concat([{ name: 'OTEL_SERVICE_NAME', value: appName }, { name: 'OTEL_TRACES_SAMPLER', value: 'parentbased_traceidratio' }, { name: 'OTEL_TRACES_SAMPLER_ARG', value: '0.1' }], otelDestination == 'appinsights' ? [{ name: 'OTEL_METRICS_EXPORTER', value: 'none' }] : [])

var vaultSecrets = [for (e, i) in keyVaultEnv: { name: 'kv-${i}', keyVaultUrl: e.secretUri, identity: identity.id }]
var vaultEnv = [for (e, i) in keyVaultEnv: { name: e.env, secretRef: 'kv-${i}' }]

// Every secret the app reads: its config, the Redis URL, the Key Vault
// references.
var secrets = concat([configSecret], redisSecrets, vaultSecrets)

// configHash is a digest of every secret's value or reference, set as an env
// var of the container so that it is part of the revision template.
// Container Apps makes no revision when only a secret changes and
// running replicas keep the value they started with ("deploy a new revision
// or restart"); the gateway reads its config once, at start. With the
// digest in the template, a changed tenant row, model list or required role
// changes exactly the templates of the apps whose config it changes, each
// of which gets a new revision (Single mode: the old one is deactivated
// when the new one is ready), and no other app restarts. A Key Vault
// reference hashes by its URI: a new version of a secret reaches the app
// only through a versioned URI (docs/day-two.md) or a restart.
// scripts/azconfig computes the same digest's input for every app.
var configHash = uniqueString(string(secrets))

resource app 'Microsoft.App/containerApps@2024-03-01' = {
  name: appName
  location: location
  tags: tags
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: { '${identity.id}': {}, '${pullIdentity.id}': {} }
  }
  dependsOn: [openAiAccess]
  properties: {
    environmentId: environmentId
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
        { server: registry.properties.loginServer, identity: pullIdentity.id }
      ]
      secrets: secrets
    }
    template: {
      containers: [
        {
          name: 'gateway'
          image: containerImage
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
            { name: 'GATEWAY_CONFIG_HASH', value: configHash }
          ], redisEnv, vaultEnv, otelEnv)
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
              httpGet: { path: healthPath, port: port, httpHeaders: readinessHeaders }
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
      // Scale to zero, always: an idle app costs no compute.
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

output name string = app.name
output url string = 'https://${app.properties.configuration.ingress.fqdn}'
