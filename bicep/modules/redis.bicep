// Optional Azure Cache for Redis for the rate limiter's shared store, with
// Microsoft Entra authentication enabled and the gateway's identity given a
// data access policy. The gateway's Redis client still authenticates with the
// access key (REDIS_URL); the Entra assignment is there for when it can send
// a token as the password.

param name string
param location string
param tags object

@description('Object (principal) ID of the gateway identity.')
param principalId string

resource redis 'Microsoft.Cache/redis@2024-03-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'Basic'
      family: 'C'
      capacity: 0
    }
    enableNonSslPort: false
    minimumTlsVersion: '1.2'
    redisConfiguration: {
      'aad-enabled': 'true'
    }
  }
}

// Data Contributor: reads, writes and Lua scripts (the limiter's take is one
// EVALSHA), none of the dangerous admin commands.
resource gatewayAccess 'Microsoft.Cache/redis/accessPolicyAssignments@2024-03-01' = {
  parent: redis
  name: 'gateway'
  properties: {
    accessPolicyName: 'Data Contributor'
    objectId: principalId
    objectIdAlias: 'gateway'
  }
}

output hostName string = redis.properties.hostName
output sslPort int = redis.properties.sslPort
output name string = redis.name
