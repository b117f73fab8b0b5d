package server

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmgw/gateway/shared/tenant"
)

// accountStateGateway: one pool of kind for model "m"; tenant t1 has
// every grant but file_id, t2 none.
func accountStateGateway(t *testing.T, kind string) (*testGateway, *recordingBackend) {
	t.Helper()
	return recordedGateway(t, kind, map[string]tenant.Grant{"data_sources": {}, "priority": {}, "kv_transfer_params": {},
		"code_execution": {}, "image_generation": {}})
}

// recordedGateway: one pool of kind for model "m", answered by a
// recording backend; tenant t1 has grants, t2 none.
func recordedGateway(t *testing.T, kind string, grants map[string]tenant.Grant) (*testGateway, *recordingBackend) {
	t.Helper()
	b := &recordingBackend{}
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	g := gatewayOnKind(t, kind, func(d *Deps) {
		d.Auth = tokenIsTenant{}
		d.Tenants = tenant.NewTable([]tenant.Row{{ID: "t1", Models: []string{"m"}, Grants: grants}, {ID: "t2", Models: []string{"m"}}})
	}, srv.URL)
	return g, b
}

// TestAccountStateFieldsAreFeatures: the body fields that make the one
// backend account or a shared backend act for a tenant are features,
// refused (400 feature_not_enabled, naming the param) for a tenant
// without the grant, and never sent to the backend. Before: each was
// forwarded byte for byte: Azure's On your data retrieved from any index
// the operator's resource identity reads, a code interpreter or an image
// edit read another tenant's files, vLLM's priority preempted every other
// tenant and kv_transfer_params named other hosts' cache blocks.
func TestAccountStateFieldsAreFeatures(t *testing.T) {
	t.Parallel()
	const onYourData = `{"model":"m","messages":[{"role":"user","content":"hi"}],"data_sources":[{"type":"azure_search","parameters":` +
		`{"endpoint":"https://search.example","index_name":"other-tenants","authentication":{"type":"system_assigned_managed_identity"}}}]}`
	for _, c := range []struct {
		name, kind, path, tenant, body, param string
	}{
		{"azure data_sources", "azure-openai", "/v1/chat/completions", "t2", onYourData, "data_sources"},
		{"code interpreter's file ids", "openai", "/v1/responses", "t1",
			`{"model":"m","input":"hi","tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":["file-of-another"]}}]}`, "tools[0]"},
		{"image mask's file id", "openai", "/v1/responses", "t1",
			`{"model":"m","input":"hi","tools":[{"type":"image_generation","input_image_mask":{"file_id":"file-of-another"}}]}`, "tools[0]"},
		{"vllm priority", "vllm", "/v1/chat/completions", "t2", `{"model":"m","priority":-100,"messages":[{"role":"user","content":"hi"}]}`, "priority"},
		{"vllm kv_transfer_params", "vllm", "/v1/completions", "t2",
			`{"model":"m","prompt":"hi","kv_transfer_params":{"remote_host":"10.0.0.9","remote_block_ids":[1,2,3]}}`, "kv_transfer_params"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			g, b := accountStateGateway(t, c.kind)
			resp, out := g.call(t, "POST", c.path, c.tenant, c.body)
			s := string(out)
			if resp.StatusCode != 400 || !strings.Contains(s, "feature_not_enabled") || !strings.Contains(s, `"param":"`+c.param) {
				t.Fatalf("%d %s", resp.StatusCode, out)
			}
			if hits := b.calls(); hits != 0 {
				t.Fatalf("the backend was called %d times", hits)
			}
		})
	}
	// With the grant the field is the tenant's to send, as sent.
	g, b := accountStateGateway(t, "azure-openai")
	if resp, out := g.call(t, "POST", "/v1/chat/completions", "t1", strings.Replace(onYourData, `{`, `{"stream":true,`, 1)); resp.StatusCode != 200 {
		t.Fatalf("granted: %d %s", resp.StatusCode, out)
	}
	if _, ok := b.last(t)["data_sources"]; !ok {
		t.Fatal("granted data_sources not forwarded")
	}
}
