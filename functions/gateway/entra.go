package main

import (
	"context"
	"log/slog"

	"github.com/llmgw/gateway/shared/upstream/entra"
)

// newEntra builds an explicit Entra ID credential (a backend's, or keyless
// Redis's) and starts fetching its first token in the background: the first
// request waits only if it arrives before the token does.
func newEntra(ctx context.Context, c entra.Config, log *slog.Logger) (*entra.Credential, error) {
	cred, err := entra.New(c, log)
	if err != nil {
		return nil, err
	}
	cred.Start(ctx)
	return cred, nil
}
