package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// legRelays are the relays the backend-legs tables set side by side, in
// table order: floor-epoll's prototype runs on plain only.
func (r *report) legRelays() []string {
	return slices.DeleteFunc(r.relays(), func(t string) bool { return t == "floor-epoll" })
}

// legRuns are target's closed-loop runs at level on leg.
func (r *report) legRuns(leg, target string, level int) []runResult {
	return r.res.runs[runKey{target, legMode("closed", leg), level}]
}

// legRatio is the gateway's median of f over a peer's, "—" when either is
// missing.
func (r *report) legRatio(leg, peer string, level int, f func(runResult) float64) string {
	g, p := r.legRuns(leg, "gateway", level), r.legRuns(leg, peer, level)
	if len(g) == 0 || len(p) == 0 {
		return "—"
	}
	a, _, _ := medianOf(g, f)
	c, _, _ := medianOf(p, f)
	if c == 0 || math.IsNaN(a) || math.IsNaN(c) {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/c)
}

// legProtocol is what relay spoke to leg's stub, as the stub counted it,
// with nginx's limit named where the backend offered more.
func (r *report) legProtocol(leg, relay string) string {
	p, ok := r.res.backendProto[legKey{leg, relay}]
	if !ok {
		return "—"
	}
	if relay == "nginx" && leg == legH2 && strings.HasPrefix(p, "HTTP/1.1") {
		p += " (nginx's proxy speaks HTTP/1.1 only)"
	}
	return p
}

// legView is the backend-legs section: what each relay negotiated, and
// its CPU, latency and memory per leg beside its peers.
type legView struct {
	Protocols, Table *mdTable
}

// legsView is nil when no closed-loop run has a leg.
func (r *report) legsView() *legView {
	res := r.res
	relays := r.legRelays()
	if len(res.legs) == 0 || len(relays) == 0 {
		return nil
	}
	v := &legView{}
	v.Protocols = newTable(append([]string{"backend leg"}, relays...)...)
	for _, leg := range res.legs {
		row := []string{legTitle(leg)}
		for _, t := range relays {
			row = append(row, r.legProtocol(leg, t))
		}
		v.Protocols.add(row...)
	}

	var peers []string
	for _, t := range relays {
		if t != "gateway" {
			peers = append(peers, t)
		}
	}
	cols := []string{"streams>", "backend leg"}
	cols = append(cols, suffixAll(prefixAll(relays, "CPU/event: "), ">")...)
	cols = append(cols, suffixAll(prefixAll(peers, "gateway ÷ "), ">")...)
	cols = append(cols, suffixAll(prefixAll(relays, "TTFT p99: "), ">")...)
	cols = append(cols, suffixAll(prefixAll(relays, "RSS max: "), ">")...)
	cols = append(cols, "errors")
	v.Table = newTable(cols...)
	for _, n := range res.plan.levels {
		for _, leg := range res.legs {
			row := []string{fmt.Sprint(n), legTitle(leg)}
			measured := false
			for _, t := range relays {
				runs := r.legRuns(leg, t, n)
				measured = measured || len(runs) > 0
				row = append(row, cell(runs, cpuEvt, "%.1f µs"))
			}
			if !measured {
				continue
			}
			for _, p := range peers {
				row = append(row, r.legRatio(leg, p, n, cpuEvt))
			}
			for _, t := range relays {
				row = append(row, medOnly(r.legRuns(leg, t, n), ttftP99, "%.2f ms"))
			}
			for _, t := range relays {
				row = append(row, medOnly(r.legRuns(leg, t, n), rssMiB, "%.1f MiB"))
			}
			var errs []runResult
			for _, t := range relays {
				errs = append(errs, r.legRuns(leg, t, n)...)
			}
			row = append(row, errSum(errs))
			v.Table.add(row...)
		}
	}
	if len(v.Table.Rows) == 0 {
		return nil
	}
	return v
}

func prefixAll(v []string, prefix string) []string {
	out := make([]string, len(v))
	for i, s := range v {
		out[i] = prefix + s
	}
	return out
}

// legsSummary is the console version of the backend-legs table: CPU per
// event side by side and the gateway's ratio to each peer.
func (r *report) legsSummary() string {
	relays := r.legRelays()
	if len(r.res.legs) == 0 || len(relays) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintln(&b, "\n== backend legs: CPU per relayed event, median of repetitions ==")
	fmt.Fprintf(&b, "%7s %-16s", "streams", "leg")
	for _, t := range relays {
		fmt.Fprintf(&b, " %10s", t)
	}
	for _, t := range relays {
		if t != "gateway" {
			fmt.Fprintf(&b, " %10s", "g÷"+t)
		}
	}
	fmt.Fprintln(&b)
	for _, n := range r.res.plan.levels {
		for _, leg := range r.res.legs {
			if len(r.legRuns(leg, "gateway", n)) == 0 {
				continue
			}
			fmt.Fprintf(&b, "%7d %-16s", n, legTitle(leg))
			for _, t := range relays {
				fmt.Fprintf(&b, " %10s", medOnly(r.legRuns(leg, t, n), cpuEvt, "%.1fµs"))
			}
			for _, t := range relays {
				if t != "gateway" {
					fmt.Fprintf(&b, " %10s", r.legRatio(leg, t, n, cpuEvt))
				}
			}
			fmt.Fprintln(&b)
		}
	}
	fmt.Fprintln(&b, "to the backend, as the stub counted it:")
	for _, leg := range r.res.legs {
		var parts []string
		for _, t := range relays {
			parts = append(parts, t+" "+r.legProtocol(leg, t))
		}
		fmt.Fprintf(&b, "  %-16s %s\n", legTitle(leg)+":", strings.Join(parts, "; "))
	}
	return b.String()
}
