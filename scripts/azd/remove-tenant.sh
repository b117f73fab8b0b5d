#!/bin/sh
# Removes one isolated tenant from an azd environment, cleanly:
#
#   scripts/azd/remove-tenant.sh NAME
#
# ARM's incremental mode leaves a tenant that leaves GATEWAY_ISOLATED_TENANTS
# in place, still serving, so this deletes what gateway.bicep made for it,
# in the order that leaves nothing behind: its app first (it stops serving
# at once), then every role assignment of its identity (while the identity
# exists: a deleted identity's assignments stay as "Identity not found"),
# its Redis access policy assignments, its identity; last it drops the
# tenant from GATEWAY_ISOLATED_TENANTS and GATEWAY_TENANT_APPS, so the next
# `azd provision` does not bring it back and the postdeploy hook does not
# look for its app. Every other app is untouched. Run it again after a
# failure: each step skips what is already gone.
#
# Needs azd (run from the project, in the environment), jq, and the Azure
# CLI signed in to the environment's subscription.
set -eu

name="${1:?usage: scripts/azd/remove-tenant.sh NAME}"
sub=$(azd env get-value AZURE_SUBSCRIPTION_ID)
rg=$(azd env get-value AZURE_RESOURCE_GROUP)
tenants=$(azd env get-value GATEWAY_ISOLATED_TENANTS)

if ! printf '%s' "$tenants" | jq -e --arg n "$name" 'any(.[]; .name == $n)' >/dev/null; then
	echo "no isolated tenant named $name in GATEWAY_ISOLATED_TENANTS" >&2
	exit 1
fi
az="az --subscription $sub"
tagged="[?tags.\"gateway-tenant\"=='$name']"

# 1. Its app (ca-NAME).
for id in $($az resource list -g "$rg" --resource-type Microsoft.App/containerApps --query "$tagged.id" -o tsv); do
	echo "deleting app $id"
	$az resource delete --ids "$id"
done

# 2-4. Each of its identities (one, id-tenant-NAME-…): role assignments
# anywhere, Redis access policy assignments, then the identity.
for identity in $($az identity list -g "$rg" --query "$tagged.id" -o tsv); do
	principal=$($az identity show --ids "$identity" --query principalId -o tsv)
	for ra in $($az role assignment list --all --assignee "$principal" --query "[].id" -o tsv); do
		echo "deleting role assignment $ra"
		$az role assignment delete --ids "$ra"
	done
	for cluster in $($az resource list -g "$rg" --resource-type Microsoft.Cache/redisEnterprise --query "[].id" -o tsv); do
		# A relative URL: az rest puts the current cloud's Resource Manager in front.
		for apa in $($az rest --method get --url "$cluster/databases/default/accessPolicyAssignments?api-version=2025-04-01" \
			--query "value[?properties.user.objectId=='$principal'].id" -o tsv); do
			echo "deleting Redis access $apa"
			$az rest --method delete --url "$apa?api-version=2025-04-01"
		done
	done
	echo "deleting identity $identity"
	$az identity delete --ids "$identity"
done

# 5. The environment: the tenant list and the apps the postdeploy hook moves.
rest=$(printf '%s' "$tenants" | jq -c --arg n "$name" 'map(select(.name != $n))')
azd env set GATEWAY_ISOLATED_TENANTS "$rest"
azd env set GATEWAY_TENANT_APPS "$(printf '%s' "$rest" | jq -r 'map("ca-" + .name) | join(" ")')"
echo "tenant $name removed"
