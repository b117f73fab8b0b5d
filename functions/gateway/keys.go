package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/llmgw/gateway/shared/assemble"
	"github.com/llmgw/gateway/shared/auth"
	"github.com/llmgw/gateway/shared/config"
	"github.com/llmgw/gateway/shared/keys"
	"github.com/llmgw/gateway/shared/server"
	"github.com/llmgw/gateway/shared/stores"
)

// withKeys is the request's credential check: jwt alone, or with
// api_keys.secret_env set, gateway keys (the config's and the store's)
// beside it, told apart by their prefix.
func withKeys(cfg *config.Config, jwt *auth.Verifier, st keys.Store, getenv func(string) string) (server.Authenticator, error) {
	ks := assemble.Keys(cfg)
	if ks.SecretEnv == "" {
		return jwt, nil
	}
	v, err := keys.NewVerifier([]byte(getenv(ks.SecretEnv)), keys.Options{Keys: ks.Keys, Store: st, CacheTTL: ks.CacheTTL, CacheSize: ks.CacheSize})
	if err != nil {
		return nil, err
	}
	return keys.Authenticator{Keys: v, JWT: jwt}, nil
}

// runKeys is "gateway keys create|list|revoke|rotate": the operator's
// management of the gateway keys in the config's store (or, with
// create -print, a config entry for api_keys.keys). Every change is an
// audit line on stderr naming the key by its public id.
func runKeys(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) < 1 {
		return fmt.Errorf("%w: gateway keys create|list|revoke|rotate [flags]", errUsage)
	}
	verb := args[0]
	fs := newFlags("keys "+verb, getenv, stderr)
	tenant := fs.String("tenant", "", "create: the key's tenant")
	project := fs.String("project", "", "create: the key's project")
	user := fs.String("user", "", "create: the key's user")
	models := fs.String("models", "", "create: comma-separated models the key narrows its tenant's to")
	ttl := fs.Duration("ttl", keys.DefaultTTL, "create, rotate: the new key's life (at most api_keys.max_ttl)")
	overlap := fs.Duration("overlap", keys.DefaultOverlap, "rotate: how long the old key keeps working")
	id := fs.String("id", "", "revoke, rotate: the key's public id")
	printEntry := fs.Bool("print", false, "create: print an api_keys.keys entry for the config instead of storing the key")
	cfg, err := fs.load(args[1:], getenv)
	if err != nil {
		return err
	}
	ks := assemble.Keys(cfg)
	if ks.SecretEnv == "" {
		return fmt.Errorf("%w: the config sets no api_keys.secret_env", errUsage)
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	m := keys.Manager{Secret: []byte(getenv(ks.SecretEnv)), MaxTTL: ks.MaxTTL, Log: log}
	rec := keys.Record{Tenant: *tenant, Project: *project, User: *user}
	if *models != "" {
		rec.Models = strings.Split(*models, ",")
	}
	if verb == "create" && *printEntry {
		key, rec, err := m.New(rec, *ttl)
		if err != nil {
			return err
		}
		entry, _ := yaml.Marshal([]keys.Record{rec})
		fmt.Fprintf(stdout, "# %s (shown once; the config keeps its digest)\n%s", key, entry)
		return nil
	}
	sc, err := storeConfig(ctx, cfg, getenv, log)
	if err != nil {
		return err
	}
	set, err := stores.Open(ctx, sc)
	if err != nil {
		return err
	}
	defer set.Close()
	m.Store = set.Keys
	const by = "cli"
	switch verb {
	case "create":
		key, rec, err := m.Create(ctx, rec, *ttl, by)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n# %s expires %s (shown once)\n", key, rec.Display(), rec.Expires.Format(time.RFC3339))
	case "rotate":
		key, rec, err := m.Rotate(ctx, *id, *ttl, *overlap, by)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n# %s replaces %s, which works %s more\n", key, rec.Display(), *id, *overlap)
	case "revoke":
		return m.Revoke(ctx, *id, by)
	case "list":
		list, err := m.List(ctx)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		for _, r := range list {
			if err := enc.Encode(struct {
				Key string `json:"key"`
				keys.Record
			}{r.Display(), r}); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("%w: gateway keys create|list|revoke|rotate, not %q", errUsage, verb)
	}
	return nil
}
