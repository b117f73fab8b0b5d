// The image an existing Container App runs now, or '' when it does not
// exist. azd's own scaffold does the same (fetch-container-image): azd sets
// SERVICE_<NAME>_RESOURCE_EXISTS before every provision by looking the
// service's app up, and a provision reads the image that app runs instead
// of a stored image name, which may be stale (after azd down the registry
// that held it is gone) or absent (a fresh azd environment in CI).

@description('Whether the app exists (SERVICE_GATEWAY_RESOURCE_EXISTS).')
param exists bool

@minLength(1)
@description('The Container App\'s name: always a real name, so that the reference below is valid whether or not it is read.')
param appName string

resource app 'Microsoft.App/containerApps@2024-03-01' existing = if (exists) {
  name: appName
}

@description('The image of the app\'s first container (the gateway), or empty.')
output image string = exists ? app.properties.template.containers[0].image : ''
