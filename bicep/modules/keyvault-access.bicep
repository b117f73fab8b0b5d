// Grants one principal "Key Vault Secrets User" on an existing vault, so the
// Container App can resolve Key Vault secret references with its identity.
// Deployed into the vault's own resource group, and only when a vault is
// named (gateway.bicep deploys this module conditionally).

@description('Name of the existing Key Vault (RBAC permission model).')
param vaultName string

@description('Object (principal) ID of the managed identity to grant.')
param principalId string

// Key Vault Secrets User, a built-in role; its ID is the same in every tenant.
var keyVaultSecretsUserRoleId = '4633458b-17de-408a-b874-0445c86b69e6'

resource vault 'Microsoft.KeyVault/vaults@2023-07-01' existing = {
  name: vaultName
}

resource secretsUser 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(vault.id, principalId, keyVaultSecretsUserRoleId)
  scope: vault
  properties: {
    principalId: principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', keyVaultSecretsUserRoleId)
  }
}
