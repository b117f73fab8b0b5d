package redistest

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of three primaries (no replicas) on
// loopback, each a Server owned by the test: the kind of store that
// refuses a script whose keys span slots (CROSSSLOT) and answers MOVED
// for a key on another node.
type Cluster struct {
	// Nodes are the primaries, each serving a third of the slots.
	Nodes []*Server
}

// clusterTimeout bounds the wait for every node to report the cluster
// whole (cluster_state:ok and every node known).
const clusterTimeout = 10 * time.Second

// StartCluster starts three cluster nodes (StartWith's Cluster), joins
// them with redis-cli --cluster create (the slots split evenly, no
// replicas), waits until each reports cluster_state:ok and knows the
// others, and stops them when the test ends. It takes a second or two: a
// package shares one through its tests (sync.Once or TestMain). A missing
// redis-cli fails the test.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redistest: redis-cli not on PATH (%v); it comes with redis-server (apt-get install -y redis-server)", err)
	}
	c := &Cluster{}
	args := []string{"--cluster", "create"}
	for range 3 {
		n := StartWith(t, Options{Cluster: true})
		c.Nodes = append(c.Nodes, n)
		args = append(args, n.Addr())
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(clusterTimeout)
	for _, n := range c.Nodes {
		for {
			info, err := n.query(time.Second, "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: node %s not in a whole cluster within %s: %q %v", n.Addr(), clusterTimeout, info, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return c
}

// URL is the cluster client's URL: the first node, the others as
// ?addr= (go-redis ParseClusterURL).
func (c *Cluster) URL() string {
	q := url.Values{}
	for _, n := range c.Nodes[1:] {
		q.Add("addr", n.Addr())
	}
	return fmt.Sprintf("redis://%s?%s", c.Nodes[0].Addr(), q.Encode())
}

// Kind is one kind of Redis a store's conformance tests run on: its
// client's URL and whether the client must be a cluster client.
type Kind struct {
	// Name names the subtests: "single" or "cluster".
	Name string
	// URL is the server's (Server.URL) or the cluster's (Cluster.URL).
	URL string
	// Cluster is whether the client must be a Redis Cluster client.
	Cluster bool
}

// Kinds starts one single-node server and one three-primary cluster for
// t and returns both kinds, so that a suite runs as a subtest of each.
func Kinds(t testing.TB) []Kind {
	t.Helper()
	return []Kind{
		{Name: "single", URL: Start(t).URL()},
		{Name: "cluster", URL: StartCluster(t).URL(), Cluster: true},
	}
}
