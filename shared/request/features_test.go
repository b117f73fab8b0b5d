package request

import (
	"errors"
	"strings"
	"testing"
)

// TestFeaturesOf is the table of server-side feature shapes from the
// OpenAI and Anthropic API references: which feature each asks
// for, at which param, with what bound on its uses; which tools are the
// caller's own; and which are unknown (refused: they may be server tools).
func TestFeaturesOf(t *testing.T) {
	tests := []struct {
		name    string
		op      Operation
		body    string
		feature Feature
		param   string // "" = no feature
		bound   int64
		unknown string
	}{
		// Anthropic's Messages API.
		{"web_search with max_uses", Messages, `{"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":1000}]}`, WebSearch, "tools[0]", 1000, ""},
		{"web_fetch", Messages, `{"tools":[{"name":"f","input_schema":{}},{"type":"web_fetch_20250910","name":"web_fetch"}]}`, WebFetch, "tools[1]", 0, ""},
		{"code_execution", Messages, `{"tools":[{"type":"code_execution_20250825","name":"code_execution"}]}`, CodeExecution, "tools[0]", 0, ""},
		{"computer", Messages, `{"tools":[{"type":"computer_20250124","name":"computer","display_width_px":1}]}`, ComputerUse, "tools[0]", 0, ""},
		{"mcp_servers", Messages, `{"mcp_servers":[{"type":"url","url":"https://evil.example/mcp","name":"x","authorization_token":"t"}]}`, MCP, "mcp_servers", 0, ""},
		{"container id", Messages, `{"container":"container_of_another"}`, Container, "container", 0, ""},
		{"document file source", Messages, `{"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"file_1"}}]}]}`, FileID, "messages.file_id", 0, ""},
		{"container_upload", Messages, `{"messages":[{"role":"user","content":[{"type":"container_upload","file_id":"file_1"}]}]}`, FileID, "messages.file_id", 0, ""},
		{"file_id in system, escaped key", Messages, `{"system":[{"type":"document","source":{"type":"file","file_\u0069d":"file_1"}}]}`, FileID, "system.file_id", 0, ""},
		{"count_tokens with web_search", CountTokens, `{"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, WebSearch, "tools[0]", 0, ""},
		{"unknown typed tool", Messages, `{"tools":[{"type":"tool_search_tool_regex_20251119","name":"s"}]}`, 0, "", 0, "tools[0].type"},
		{"custom tool", Messages, `{"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"file_id":{"type":"string"}}}}]}`, 0, "", 0, ""},
		{"bash and text_editor", Messages, `{"tools":[{"type":"bash_20250124","name":"bash"},{"type":"text_editor_20250728","name":"str_replace_based_edit_tool"},{"type":"custom","name":"c","input_schema":{}}]}`, 0, "", 0, ""},
		{"mcp_servers empty", Messages, `{"mcp_servers":[]}`, 0, "", 0, ""},
		{"container null", Messages, `{"container":null}`, 0, "", 0, ""},
		{"file_id as text", Messages, `{"messages":[{"role":"user","content":"file_id: file_1"}]}`, 0, "", 0, ""},
		{"base64 document", Messages, `{"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBE"}}]}]}`, 0, "", 0, ""},

		// The Responses API.
		// Codex 0.171 groups tools in namespaces: the
		// namespace is as its tools are.
		{"namespace of functions", Responses, `{"tools":[{"type":"function","name":"f"},{"type":"namespace","name":"multi_agent_v1","tools":[{"type":"function","name":"spawn"}]}]}`, 0, "", 0, ""},
		{"web_search in a namespace", Responses, `{"tools":[{"type":"namespace","name":"n","tools":[{"type":"function","name":"f"},{"type":"web_search"}]}]}`, WebSearch, "tools[1]", 0, ""},
		{"unknown tool in a namespace", Responses, `{"tools":[{"type":"namespace","name":"n","tools":[{"type":"hosted_thing"}]}]}`, 0, "", 0, "tools[0].type"},
		{"namespace without tools", Responses, `{"tools":[{"type":"namespace","name":"n"}]}`, 0, "", 0, "tools[0].type"},
		{"web_search", Responses, `{"tools":[{"type":"web_search"}]}`, WebSearch, "tools[0]", 0, ""},
		// Codex also sends tools in an input item (additional_tools):
		// they are checked as the body's own.
		{"web_search in an input item", Responses, `{"input":[{"type":"message","role":"user","content":"hi"},{"type":"additional_tools","tools":[{"type":"function","name":"f"},{"type":"web_search"}]}]}`, WebSearch, "input.tools[1]", 0, ""},
		{"unknown tool in an input item", Responses, `{"input":[{"type":"additional_tools","tools":[{"type":"hosted_thing"}]}]}`, 0, "", 0, "input.tools[0].type"},
		{"functions in an input item", Responses, `{"input":[{"type":"additional_tools","tools":[{"type":"function","name":"f"},{"type":"custom","name":"apply_patch"}]}]}`, 0, "", 0, ""},
		{"web_search_preview, max_tool_calls", Responses, `{"max_tool_calls":4,"tools":[{"type":"web_search_preview"}]}`, WebSearch, "tools[0]", 4, ""},
		{"file_search", Responses, `{"tools":[{"type":"file_search","vector_store_ids":["vs_of_another"]}]}`, FileSearch, "tools[0]", 0, ""},
		{"code_interpreter", Responses, `{"tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`, CodeExecution, "tools[0]", 0, ""},
		{"code_interpreter in a container", Responses, `{"tools":[{"type":"code_interpreter","container":"cntr_of_another"}]}`, Container, "tools[0].container", 0, ""},
		{"mcp", Responses, `{"tools":[{"type":"mcp","server_label":"x","server_url":"https://evil.example","authorization":"t"}]}`, MCP, "tools[0]", 0, ""},
		{"mcp connector", Responses, `{"tools":[{"type":"mcp","server_label":"x","connector_id":"connector_gmail"}]}`, MCP, "tools[0]", 0, ""},
		{"image_generation", Responses, `{"tools":[{"type":"image_generation"}]}`, ImageGeneration, "tools[0]", 0, ""},
		{"computer_use_preview", Responses, `{"tools":[{"type":"computer_use_preview","display_width":1,"display_height":1,"environment":"linux"}]}`, ComputerUse, "tools[0]", 0, ""},
		{"input_file by id", Responses, `{"input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}]}`, FileID, "input.file_id", 0, ""},
		{"input_image by id", Responses, `{"input":[{"role":"user","content":[{"type":"input_image","file_id":"file-1"}]}]}`, FileID, "input.file_id", 0, ""},
		{"unknown tool type", Responses, `{"tools":[{"type":"some_new_server_tool"}]}`, 0, "", 0, "tools[0].type"},
		{"function tool", Responses, `{"tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"file_id":{"type":"string"}}}}]}`, 0, "", 0, ""},
		{"input_image by url", Responses, `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"https://x/cat.png"}]}]}`, 0, "", 0, ""},
		{"input_file by data", Responses, `{"input":[{"role":"user","content":[{"type":"input_file","filename":"a.pdf","file_data":"data:application/pdf;base64,JVBE"}]}]}`, 0, "", 0, ""},

		// Chat Completions.
		{"chat file part by id", ChatCompletions, `{"messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-1"}}]}]}`, FileID, "messages.file_id", 0, ""},
		{"chat web_search_options", ChatCompletions, `{"messages":[],"web_search_options":{}}`, WebSearch, "web_search_options", 0, ""},
		{"chat function tool", ChatCompletions, `{"messages":[],"tools":[{"type":"function","function":{"name":"f"}}]}`, 0, "", 0, ""},
		{"chat unknown tool", ChatCompletions, `{"messages":[],"tools":[{"type":"web_search"}]}`, 0, "", 0, "tools[0].type"},
		// Fields that reach the account's or a shared backend's state, on
		// every row: Azure's On your data, vLLM's scheduling and KV cache.
		{"chat data_sources", ChatCompletions, `{"messages":[],"data_sources":[{"type":"azure_search","parameters":{"index_name":"i"}}]}`, DataSources, "data_sources", 0, ""},
		{"data_sources null", ChatCompletions, `{"messages":[],"data_sources":null}`, 0, "", 0, ""},
		{"vllm priority", Completions, `{"prompt":"x","priority":-10}`, Priority, "priority", 0, ""},
		{"vllm kv_transfer_params", Embeddings, `{"input":"x","kv_transfer_params":{"remote_host":"h"}}`, KVTransfer, "kv_transfer_params", 0, ""},
		// File ids inside a server tool name stored files too.
		{"code_interpreter's file_ids", Responses, `{"tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":["file-1"]}}]}`, FileID, "tools[0].file_id", 0, ""},
		{"code_interpreter's empty file_ids", Responses, `{"tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":[ ]}}]}`, CodeExecution, "tools[0]", 0, ""},
		{"image_generation's mask", Responses, `{"tools":[{"type":"image_generation","input_image_mask":{"file_id":"file-1"}}]}`, FileID, "tools[0].file_id", 0, ""},
		{"file_id in an input item's tool", Responses, `{"input":[{"type":"additional_tools","tools":[{"type":"image_generation","input_image_mask":{"file_id":"f"}}]}]}`, FileID, "input.file_id", 0, ""},
		{"embeddings ignore tools", Embeddings, `{"input":"x","tools":[{"type":"web_search"}]}`, 0, "", 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseBody([]byte(tt.body)); err != nil && err != ErrMissingModel {
				t.Fatalf("not a body the parser takes: %v", err)
			}
			u, err := FeaturesOf([]byte(tt.body), tt.op)
			if err != nil {
				t.Fatal(err)
			}
			if u.Unknown != tt.unknown {
				t.Fatalf("unknown %q, want %q", u.Unknown, tt.unknown)
			}
			if tt.param == "" {
				for f := range numFeatures {
					if u.Asked(f) {
						t.Fatalf("asks for %s at %s, want nothing", f, u.Param[f])
					}
				}
				return
			}
			if u.Param[tt.feature] != tt.param || u.Bound(tt.feature) != tt.bound {
				t.Fatalf("%s at %q bound %d, want %q bound %d (uses %+v)", tt.feature, u.Param[tt.feature], u.Bound(tt.feature), tt.param, tt.bound, u)
			}
		})
	}
}

// TestFeaturesOneReading: a key a tool is recognised or billed by is read
// once, as ParseBody reads model: a duplicate, an escaped duplicate or a
// variant spelling is refused with the param naming it, and so is a
// max_uses or max_tool_calls that is not a count. (Before: max_uses read
// the last of two, max_tool_calls too, and a backend that reads the first
// ran up to 1000 uses reserved as 1; a second type made the tool unknown,
// refused as unsupported_tool rather than as the duplicate it is.) The
// top-level max_tool_calls is ParseBody's; the rest is FeaturesOf's.
func TestFeaturesOneReading(t *testing.T) {
	tests := []struct {
		name, body, param string
		op                Operation
		dup               bool // a *KeyError for a duplicate; else a variant or an *IntError
	}{
		{"max_uses twice", `{"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":1000,"max_uses":1}]}`, "tools[0].max_uses", Messages, true},
		{"max_uses escaped first", `{"tools":[{"type":"web_search_20250305","name":"web_search","max_\u0075ses":1000,"max_uses":1}]}`, "tools[0].max_uses", Messages, true},
		{"max_uses in the second tool", `{"tools":[{"name":"f","input_schema":{}},{"type":"web_fetch_20250910","name":"web_fetch","max_uses":1,"max_uses":50}]}`, "tools[1].max_uses", Messages, true},
		{"max_uses a case variant", `{"tools":[{"type":"web_search_20250305","name":"web_search","Max_Uses":1000,"max_uses":1}]}`, "tools[0].max_uses", Messages, false},
		{"max_uses a string", `{"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":"1000"}]}`, "tools[0].max_uses", Messages, false},
		{"max_uses an exponent", `{"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":1e3}]}`, "tools[0].max_uses", Messages, false},
		{"tool type twice", `{"tools":[{"type":"web_search","type":"function","name":"f"}]}`, "tools[0].type", Responses, true},
		{"tool type escaped twice", `{"tools":[{"type":"function","typ\u0065":"web_search","name":"f"}]}`, "tools[0].type", Responses, true},
		{"tool type twice, chat", `{"messages":[],"tools":[{"type":"function","type":"web_search","function":{"name":"f"}}]}`, "tools[0].type", ChatCompletions, true},
		{"container twice", `{"tools":[{"type":"code_interpreter","container":{"type":"auto"},"container":"cntr_of_another"}]}`, "tools[0].container", Responses, true},
		{"namespace tools twice", `{"tools":[{"type":"namespace","name":"n","tools":[{"type":"web_search"}],"tools":[]}]}`, "tools[0].tools", Responses, true},
		{"in a namespace", `{"tools":[{"type":"namespace","name":"n","tools":[{"type":"function","name":"f"},{"type":"web_search","type":"function"}]}]}`, "tools[1].type", Responses, true},
		{"in an input item", `{"input":[{"type":"additional_tools","tools":[{"type":"function","name":"f","type":"web_search"}]}]}`, "input.tools[0].type", Responses, true},
		{"max_tool_calls twice", `{"max_tool_calls":1000,"max_tool_calls":1,"tools":[{"type":"web_search"}]}`, "max_tool_calls", Responses, true},
		{"max_tool_calls escaped first", `{"max_tool_c\u0061lls":1000,"max_tool_calls":1,"tools":[{"type":"web_search"}]}`, "max_tool_calls", Responses, true},
		{"max_tool_calls a fraction", `{"max_tool_calls":1.5,"tools":[{"type":"web_search"}]}`, "max_tool_calls", Responses, false},
		{"service_tier twice", `{"service_tier":"default","service_tier":"priority"}`, "service_tier", Responses, true},
		{"max_output_tokens escaped twice", `{"max_output_t\u006fkens":100000,"max_output_tokens":16}`, "max_output_tokens", Responses, true},
		{"n twice", `{"messages":[],"n":1,"n":8}`, "n", ChatCompletions, true},
		{"budget_tokens twice", `{"max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024,"budget_tokens":100000}}`, "thinking.budget_tokens", Messages, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := error(nil)
			if _, err = ParseBody([]byte(tt.body)); errors.Is(err, ErrMissingModel) {
				_, err = FeaturesOf([]byte(tt.body), tt.op)
			}
			var ke *KeyError
			var ie *IntError
			switch {
			case errors.As(err, &ke):
				if ke.Param != tt.param || ke.Duplicate != tt.dup {
					t.Fatalf("%+v, want param %q duplicate %v", ke, tt.param, tt.dup)
				}
			case errors.As(err, &ie):
				if ie.Param != tt.param || tt.dup {
					t.Fatalf("%+v, want param %q duplicate %v", ie, tt.param, tt.dup)
				}
			default:
				t.Fatalf("%v, want a refusal naming %s", err, tt.param)
			}
		})
	}
	// The same bodies read once pass.
	for _, body := range []string{
		`{"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":1}]}`,
		`{"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":null}]}`,
	} {
		if u, err := FeaturesOf([]byte(body), Messages); err != nil || u.Bound(WebSearch) != 1 && !strings.Contains(body, "null") {
			t.Errorf("%s: %+v %v", body, u, err)
		}
	}
	if u, err := FeaturesOf([]byte(`{"max_tool_calls":0,"tools":[{"type":"web_search"}]}`), Responses); err != nil || u.MaxToolCalls != 0 {
		t.Errorf("max_tool_calls 0: %+v %v", u, err)
	}
}

// TestFeatureRules: every operation has its features row.
func TestFeatureRules(t *testing.T) {
	for _, op := range Operations() {
		if operations[op].features&featDeclared == 0 {
			t.Errorf("%s has no features row", op)
		}
	}
	for _, name := range FeatureNames() {
		if f, ok := ParseFeature(name); !ok || f.String() != name {
			t.Errorf("feature %q does not round-trip", name)
		}
	}
}

func BenchmarkFeaturesOf(b *testing.B) {
	body := []byte(`{"model":"m","max_tokens":100,"system":"be brief","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]}`)
	b.ReportAllocs()
	for range b.N {
		if u, err := FeaturesOf(body, Messages); err != nil || u.Any() {
			b.Fatal("a feature")
		}
	}
}
