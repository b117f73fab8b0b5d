package redislimit_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/redistest"
	"github.com/llmgw/gateway/shared/stores/redisclient"
	"github.com/llmgw/gateway/shared/stores/redislimit"
	"github.com/redis/go-redis/v9"
)

// TestCredentialRotation is what Entra login to Azure Managed Redis does to
// the limiter: the password (a token) changes while pooled connections stay
// open, and the old one stops working. A real redis-server's ACL plays the
// service: a new user/password is created, the source switches to it, and
// the old user is deleted, which disconnects every connection still logged
// in with it (as Azure disconnects a connection whose token expired); twice.
// Then the same user's password is rotated in place. Takes run from several
// goroutines the whole time; not one may fail.
func TestCredentialRotation(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()
	acl := func(args ...any) {
		t.Helper()
		if err := admin.Do(ctx, append([]any{"ACL"}, args...)...).Err(); err != nil {
			t.Fatalf("ACL %v: %v", args, err)
		}
	}
	acl("SETUSER", "gw-1", "on", ">pass-1", "~*", "+@all")

	var cur atomic.Pointer[[2]string]
	cur.Store(&[2]string{"gw-1", "pass-1"})
	client, err := redisclient.NewClient(redisclient.ClientOptions{
		// Fewer connections than takers: every connection works.
		URL:     srv.URL() + "?pool_size=4",
		Timeout: 2 * time.Second, // semantics, not latency, on a busy machine
		Credentials: func(context.Context) (string, string, error) {
			c := cur.Load()
			return c[0], c[1], nil
		},
		CredentialsInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	store := newStore(t, client, redislimit.Config{Tokens: 1 << 40, Interval: time.Hour})
	if err := store.Warm(ctx); err != nil {
		t.Fatal(err)
	}

	var takes, failures atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, _, _, _, err := store.Take(ctx, fmt.Sprintf("tenant-%d", g)); err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
				takes.Add(1)
				time.Sleep(time.Millisecond)
			}
		}()
	}
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	// active counts, by user, the limiter's connections (not admin's) that
	// ran a command within the last second (CLIENT LIST idle=0).
	active := func() map[string]int {
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		users := map[string]int{}
		re := regexp.MustCompile(`\bidle=(\d+) .*\buser=(\S+)`)
		for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
			if m := re.FindStringSubmatch(line); m != nil && m[1] == "0" && m[2] != "default" {
				users[m[2]]++
			}
		}
		return users
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s (active connections by user: %v)", what, active())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("takes on several connections as gw-1", func() bool { return takes.Load() > 200 && active()["gw-1"] >= 2 })
	pooled := active()["gw-1"]

	// rotateUser switches the source to a new user and deletes the old one
	// once no connection that serves takes is logged in as it. Deleting a
	// user closes every connection still logged in as it, as Azure closes a
	// connection whose token expired: such a connection can only be one that
	// sat unused in the pool, which the pool's health check replaces on its
	// next use. (go-redis re-authenticates a connection when it next passes
	// through the pool; one it does not hand out keeps its old login.)
	rotateUser := func(from, to, pass string) {
		t.Helper()
		acl("SETUSER", to, "on", ">"+pass, "~*", "+@all")
		cur.Store(&[2]string{to, pass})
		time.Sleep(1100 * time.Millisecond) // idle=0 now means "used since the switch"
		waitFor("every working connection to re-AUTH as "+to, func() bool {
			a := active()
			return a[from] == 0 && a[to] >= 1
		})
		acl("DELUSER", from)
	}
	rotateUser("gw-1", "gw-2", "pass-2")
	rotateUser("gw-2", "gw-3", "pass-3")

	// The same user, a new password (what an Entra token refresh is): AUTH
	// is sent on open connections, and the old password is then removed.
	authsBefore := authCalls(t, admin)
	acl("SETUSER", "gw-3", ">pass-4")
	cur.Store(&[2]string{"gw-3", "pass-4"})
	waitFor("AUTH with the new password", func() bool { return authCalls(t, admin) > authsBefore })
	acl("SETUSER", "gw-3", "<pass-3")
	before := takes.Load()
	waitFor("more takes after the rotations", func() bool { return takes.Load() > before+200 })
	close(stop)
	wg.Wait()

	if n := failures.Load(); n != 0 {
		t.Fatalf("%d of %d takes failed across the rotations; first: %v", n, takes.Load(), firstErr.Load())
	}
	if failed := authFailures(t, admin); failed != 0 {
		t.Fatalf("%d AUTH attempts failed", failed)
	}
	t.Logf("%d takes on %d connections, three rotations, no failure", takes.Load(), pooled)
}

// authCalls is how many AUTH commands the server has run.
func authCalls(t *testing.T, c *redis.Client) int64 {
	return commandStat(t, c, "auth", "calls")
}

// authFailures is how many AUTH commands the server refused (Redis 7:
// failed_calls; ACL LOG keeps the details).
func authFailures(t *testing.T, c *redis.Client) int64 {
	n := commandStat(t, c, "auth", "failed_calls")
	if log, err := c.Do(context.Background(), "ACL", "LOG").Slice(); err == nil && len(log) > 0 {
		n += int64(len(log))
	}
	return n
}

func commandStat(t *testing.T, c *redis.Client, cmd, field string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^cmdstat_` + cmd + `:.*\b` + field + `=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}
