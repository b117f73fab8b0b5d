package azconfig

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestPredownHook runs the azd predown hook (azure.yaml)
// with the values azd gives it and a stand-in for the Azure CLI that
// answers as Azure would for an environment with a shared app and two
// tenants: every role assignment of every identity in the group is
// deleted, wherever it is (the Azure OpenAI accounts, the Key Vault),
// before `azd down` deletes the group and, with it, the identities; with
// the group already gone it deletes nothing and succeeds, so azd down
// goes on.
func TestPredownHook(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	yaml := readFile(t, filepath.Join(root, "azure.yaml"))
	if !strings.Contains(yaml, "hooks:\n  predown:\n    posix:\n      shell: sh\n      run: ./scripts/azd/predown.sh\n    windows:\n      shell: pwsh\n      run: ./scripts/azd/predown.ps1\n") {
		t.Fatal("azure.yaml does not run scripts/azd/predown.{sh,ps1} as the project's predown hook")
	}
	const (
		sub    = "00000000-0000-0000-0000-000000000001"
		rg     = "rg-gw-dev"
		shared = "d00dfeed-7777-8888-9999-aaaabbbbcccc"
		fabrik = "d00dfe01-7777-8888-9999-aaaabbbbcccc"
		pull   = "d00dfe09-7777-8888-9999-aaaabbbbcccc"
		acct   = "/subscriptions/" + sub + "/resourceGroups/rg-openai/providers/Microsoft.CognitiveServices/accounts/gw-openai/providers/Microsoft.Authorization/roleAssignments/"
		vault  = "/subscriptions/" + sub + "/resourceGroups/rg-vault/providers/Microsoft.KeyVault/vaults/gw-kv/providers/Microsoft.Authorization/roleAssignments/"
		acr    = "/subscriptions/" + sub + "/resourceGroups/" + rg + "/providers/Microsoft.ContainerRegistry/registries/crtok/providers/Microsoft.Authorization/roleAssignments/"
	)
	for _, tc := range []struct {
		name        string
		groupExists bool
		want        []string
	}{
		{"the environment's group", true, []string{
			"role assignment delete --ids " + acct + "1",
			"role assignment delete --ids " + vault + "2",
			"role assignment delete --ids " + acct + "3",
			"role assignment delete --ids " + acr + "4",
		}},
		{"the group already gone", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			calls := filepath.Join(dir, "calls")
			exists := "false"
			if tc.groupExists {
				exists = "true"
			}
			fakeAz := `#!/bin/sh
printf '%s\n' "$*" >> ` + calls + `
case "$*" in
*"group exists --name ` + rg + `"*) echo ` + exists + ` ;;
*"identity list -g ` + rg + `"*) printf '%s\n' ` + shared + ` ` + fabrik + ` ` + pull + ` ;;
*"role assignment list --all --assignee ` + shared + `"*) echo ` + acct + `1; echo ` + vault + `2 ;;
*"role assignment list --all --assignee ` + fabrik + `"*) echo ` + acct + `3 ;;
*"role assignment list --all --assignee ` + pull + `"*) echo ` + acr + `4 ;;
*"role assignment delete"*) ;;
*) echo "unexpected az $*" >&2; exit 2 ;;
esac
`
			if err := os.WriteFile(filepath.Join(dir, "az"), []byte(fakeAz), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("sh", filepath.Join(root, "scripts", "azd", "predown.sh"))
			cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin", "AZURE_SUBSCRIPTION_ID=" + sub, "AZURE_RESOURCE_GROUP=" + rg}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("predown.sh: %v\n%s", err, out.String())
			}
			b, _ := os.ReadFile(calls)
			var deletes []string
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if !strings.HasPrefix(l, "--subscription "+sub+" ") {
					t.Errorf("az call without the environment's subscription: %s", l)
				}
				if strings.Contains(l, " delete ") {
					deletes = append(deletes, strings.TrimPrefix(l, "--subscription "+sub+" "))
				}
			}
			if !slices.Equal(deletes, tc.want) {
				t.Fatalf("deletions:\n%s\nwant:\n%s\noutput:\n%s", strings.Join(deletes, "\n"), strings.Join(tc.want, "\n"), out.String())
			}
		})
	}
	// Without a provisioned environment it has nothing to do.
	cmd := exec.Command("sh", filepath.Join(root, "scripts", "azd", "predown.sh"))
	cmd.Env = []string{"PATH=/nonexistent", "AZURE_SUBSCRIPTION_ID=" + sub}
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "nothing was provisioned") {
		t.Fatalf("no resource group: %v\n%s", err, out)
	}
}
