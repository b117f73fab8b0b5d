// Grants one principal "Cognitive Services OpenAI User" on an existing Azure
// OpenAI account: inference calls only, no keys, no management. Deployed into
// the account's own resource group.

@description('Name of the existing Azure OpenAI / AI Services account.')
param accountName string

@description('Object (principal) ID of the managed identity to grant.')
param principalId string

// Cognitive Services OpenAI User, a built-in role; its ID is the same in
// every tenant.
var openAiUserRoleId = '5e0bd9bd-7b93-4f28-af87-19fc36ad61bd'

resource account 'Microsoft.CognitiveServices/accounts@2024-10-01' existing = {
  name: accountName
}

resource openAiUser 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(account.id, principalId, openAiUserRoleId)
  scope: account
  properties: {
    principalId: principalId
    principalType: 'ServicePrincipal'
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', openAiUserRoleId)
  }
}

@description('The account endpoint, e.g. https://NAME.openai.azure.com/.')
output endpoint string = account.properties.endpoint
