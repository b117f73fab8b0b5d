#!/bin/sh
# The gateway service's azd postdeploy hook (azure.yaml). `azd deploy` builds
# the image once and updates the one app tagged azd-service-name: gateway
# (the shared gateway); this moves every isolated tenant's app to that same
# image, so that no tenant runs an older build. `azd provision` keeps them
# there afterwards: it gives every app the image the shared app runs
# (bicep/modules/live-image.bicep).
#
# azd runs it with its environment's values: SERVICE_GATEWAY_IMAGE_NAME (the
# image just deployed), GATEWAY_TENANT_APPS (the tenant apps, a main.bicep
# output), AZURE_RESOURCE_GROUP and AZURE_SUBSCRIPTION_ID. It needs the
# Azure CLI, signed in (az login) to the same subscription.
set -eu

image="${SERVICE_GATEWAY_IMAGE_NAME:?azd sets SERVICE_GATEWAY_IMAGE_NAME when it deploys the gateway}"
apps="${GATEWAY_TENANT_APPS:-}"
if [ -z "$apps" ]; then
	echo "no isolated tenants: nothing to update"
	exit 0
fi
: "${AZURE_RESOURCE_GROUP:?run azd provision first}"
: "${AZURE_SUBSCRIPTION_ID:?azd sets AZURE_SUBSCRIPTION_ID}"

# One at a time, each waited for: a failure names its app and stops here,
# and `azd deploy` (or this script) can simply be run again.
for app in $apps; do
	echo "tenant app $app: $image"
	az containerapp update \
		--subscription "$AZURE_SUBSCRIPTION_ID" \
		--resource-group "$AZURE_RESOURCE_GROUP" \
		--name "$app" \
		--container-name gateway \
		--image "$image" \
		--output none
done
