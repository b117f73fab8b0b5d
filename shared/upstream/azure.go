package upstream

import "net/url"

// DefaultAzureAPIVersion is the api-version sent to the deployments
// surface when an endpoint names none: the latest GA version.
const DefaultAzureAPIVersion = "2024-10-21"

// azureDeployments is Azure OpenAI's classic surface: the deployment is in
// the path, the api-version in the query; the body's model is ignored by the
// service and left as the client sent it.
type azureDeployments struct{ apiVersion string }

func (a azureDeployments) url(base *url.URL, op Operation, deployment string) string {
	return base.String() + "/openai/deployments/" + url.PathEscape(deployment) + op.suffix() + "?api-version=" + a.apiVersion
}

func (azureDeployments) bodyModel(string) string { return "" }

func (azureDeployments) keyHeader() string { return "Api-Key" }

// azureV1 is Azure OpenAI's v1 surface (/openai/v1/...): OpenAI's shape with
// the deployment name as the body's model.
type azureV1 struct{}

func (azureV1) url(base *url.URL, op Operation, _ string) string {
	return base.String() + "/openai/v1" + op.suffix()
}

func (azureV1) bodyModel(deployment string) string { return deployment }

func (azureV1) keyHeader() string { return "Api-Key" }
