package upstream

import (
	"net/url"

	"github.com/llmgw/gateway/shared/problem"
	"github.com/llmgw/gateway/shared/request"
)

// DefaultAzureAPIVersion is the api-version sent to the deployments
// surface when an endpoint names none: the latest GA version.
const DefaultAzureAPIVersion = "2024-10-21"

// checkAzure: azure_api names one of the two surfaces.
func checkAzure(at problem.At, s TargetSpec) {
	if s.AzureAPI != "" && s.AzureAPI != "deployments" && s.AzureAPI != "v1" {
		at.Add("azure_api", "must be deployments or v1, not %q", s.AzureAPI)
	}
}

// azureDefaults: the deployments surface needs an api-version.
func azureDefaults(s TargetSpec) TargetSpec {
	if s.APIVersion == "" {
		s.APIVersion = DefaultAzureAPIVersion
	}
	return s
}

// newAzure builds the config kind azure-openai: Azure OpenAI's v1 surface
// (azure_api: v1), else its deployments surface.
func newAzure(spec TargetSpec) kind {
	if spec.AzureAPI == "v1" {
		return azureV1{}
	}
	return azureDeployments{apiVersion: url.QueryEscape(spec.APIVersion)}
}

// azureV1 is Azure OpenAI's v1 surface (/openai/v1/...): OpenAI's shape
// with the deployment name as the body's model, and Azure's api-key.
type azureV1 struct{ openAI }

func (azureV1) url(base string, op request.Operation, _ string) string {
	return base + "/openai/v1" + op.Suffix()
}

func (azureV1) root(base string) string { return base + "/openai/v1" }

func (azureV1) keyHeader() string { return "Api-Key" }

func (azureV1) provider() string { return "azure.ai.openai" }

// azureDeployments is Azure OpenAI's classic surface: the deployment is in
// the path, the api-version in the query; the body's model is ignored by the
// service and left as the client sent it. It has no Responses API.
type azureDeployments struct {
	azureV1
	apiVersion string
}

func (a azureDeployments) url(base string, op request.Operation, deployment string) string {
	return base + "/openai/deployments/" + url.PathEscape(deployment) + op.Suffix() + "?api-version=" + a.apiVersion
}

func (azureDeployments) root(string) string { return "" }

func (azureDeployments) urlNamesModel() {}

func (azureDeployments) bodyModel(string) string { return "" }

func (azureDeployments) supports(op request.Operation) bool { return op.OnDeployments() }

// capField: api-versions before 2024-09-01 know only max_tokens.
func (a azureDeployments) capField(op request.Operation) request.CapField {
	if v := a.apiVersion; len(v) >= 10 && v[:10] < "2024-09-01" {
		return maxTokensFirst(op)
	}
	return op.CapField()
}
