#!/bin/sh
# azd's predown hook (azure.yaml): before `azd down` deletes the resource
# group, deletes every role assignment of the group's identities, wherever
# it is. The group's own resources go with the group, but the identities'
# roles on the Azure OpenAI accounts and the Key Vault live in those
# resources' groups: left behind, each down/up cycle adds "Identity not
# found" assignments toward the 4,000 a subscription may hold. Runs before
# any deletion, while the identities exist (a deleted identity's
# assignments can no longer be found by its principal); run again after a
# failure: each step skips what is already gone. By hand:
# `azd hooks run predown`.
#
# azd gives it the environment's values; it needs the Azure CLI signed in
# to the environment's subscription.
set -eu

sub="${AZURE_SUBSCRIPTION_ID:?azd sets AZURE_SUBSCRIPTION_ID}"
rg="${AZURE_RESOURCE_GROUP:-}"
if [ -z "$rg" ]; then
	echo "no AZURE_RESOURCE_GROUP: nothing was provisioned, no role assignment to remove"
	exit 0
fi
az="az --subscription $sub"
if [ "$($az group exists --name "$rg")" != "true" ]; then
	echo "resource group $rg does not exist: no role assignment to remove"
	exit 0
fi
for principal in $($az identity list -g "$rg" --query "[].principalId" -o tsv); do
	for ra in $($az role assignment list --all --assignee "$principal" --query "[].id" -o tsv); do
		echo "deleting role assignment $ra"
		$az role assignment delete --ids "$ra"
	done
done
echo "role assignments of $rg's identities removed"
