package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/upstream"
)

// entraCredential builds an Entra ID credential and starts fetching its
// first token in the background.
func entraCredential(ctx context.Context, c config.Entra, log *slog.Logger) (upstream.Credential, error) {
	return nil, errors.New("entra: not wired yet")
}
