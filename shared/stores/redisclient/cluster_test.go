package redisclient_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/store"
	"github.com/llmgw/gateway/shared/stores/redisclient"
)

// TestKinds: on a single node and on a three-primary cluster, CheckKind
// accepts the client kind that matches and refuses the other as a
// configuration error naming the setting; a single-node client on a
// cluster node gets MOVED for a key on another node and a cluster client
// CROSSSLOT for keys of two slots, both classified as configuration
// errors; a shut gate fails every command with its error.
func TestKinds(t *testing.T) {
	t.Parallel()
	single, cluster := redistest.Start(t), redistest.StartCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name    string
		url     string
		cluster bool
		wrong   bool
	}{
		{name: "single on single", url: single.URL()},
		{name: "cluster on cluster", url: cluster.URL(), cluster: true},
		{name: "single on cluster node", url: cluster.Nodes[0].URL(), wrong: true},
		{name: "cluster on single", url: single.URL(), cluster: true, wrong: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := redisclient.New(redisclient.ClientOptions{URL: tc.url, Cluster: tc.cluster, Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = redisclient.CheckKind(ctx, c)
			if got := errors.Is(err, store.ErrMisconfigured); got != tc.wrong || (err != nil && !tc.wrong) {
				t.Fatalf("CheckKind: %v; want misconfigured %v", err, tc.wrong)
			}
			if tc.wrong && !strings.Contains(err.Error(), redisclient.ClusterSetting) {
				t.Errorf("CheckKind: %v does not name %s", err, redisclient.ClusterSetting)
			}
		})
	}

	t.Run("MOVED", func(t *testing.T) {
		c, err := redisclient.New(redisclient.ClientOptions{URL: cluster.Nodes[0].URL(), Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		moved := 0
		for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
			err := redisclient.Classify(c.Set(ctx, k, "1", 0).Err())
			if err == nil {
				continue
			}
			if !errors.Is(err, store.ErrMisconfigured) || !strings.HasPrefix(err.Error(), "MOVED ") || !strings.Contains(err.Error(), redisclient.ClusterSetting) {
				t.Fatalf("SET %s: %v; want MOVED as a configuration error naming the setting", k, err)
			}
			moved++
		}
		if moved == 0 {
			t.Fatal("no key of six on another node")
		}
	})
	t.Run("CROSSSLOT", func(t *testing.T) {
		c, err := redisclient.New(redisclient.ClientOptions{URL: cluster.URL(), Cluster: true, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		err = redisclient.Classify(c.Eval(ctx, "return redis.call('MSET', KEYS[1], 1, KEYS[2], 2)", []string{"a", "b"}).Err())
		if !errors.Is(err, store.ErrMisconfigured) || !strings.Contains(err.Error(), "CROSSSLOT") {
			t.Fatalf("script over two slots: %v; want CROSSSLOT as a configuration error", err)
		}
		if err := c.Eval(ctx, "return redis.call('MSET', KEYS[1], 1, KEYS[2], 2)", []string{"{t}a", "{t}b"}).Err(); err != nil {
			t.Fatalf("script over one hash tag: %v", err)
		}
	})
	t.Run("gate", func(t *testing.T) {
		c, err := redisclient.New(redisclient.ClientOptions{URL: single.URL(), Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var g redisclient.Gate
		c.AddHook(&g)
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		shut := errors.Join(errors.New("kind mismatch"), store.ErrMisconfigured)
		g.Shut(shut)
		if err := c.Ping(ctx).Err(); !errors.Is(err, store.ErrMisconfigured) {
			t.Fatalf("PING through a shut gate: %v", err)
		}
		p := c.Pipeline()
		get := p.Get(ctx, "k")
		if _, err := p.Exec(ctx); !errors.Is(err, store.ErrMisconfigured) || !errors.Is(get.Err(), store.ErrMisconfigured) {
			t.Fatalf("pipeline through a shut gate: %v, %v", err, get.Err())
		}
	})
}
