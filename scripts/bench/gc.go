package main

import "context"

// gcMode is the runKey mode of the GC table's runs: one per setting.
func gcMode(s gcSetting) string { return "gc " + s.name }

// gcTable runs the gateway at gcLevel closed-loop streams under each
// GOGC/GOMEMLIMIT setting (a fresh process each), so that the defaults
// are chosen from p99 added TTFT, CPU per event and RSS side by side.
// Repetitions visit every setting in turn, as the main table does.
func (b *bench) gcTable(ctx context.Context, res *results) error {
	p := b.plan
	for rep := 1; rep <= p.gcReps; rep++ {
		for _, s := range p.gcSettings {
			env := append([]string{}, s.env...) // non-nil: not an idle-RSS sample
			err := b.withTargetEnv(ctx, "gateway", p.gcLevel, env, res, func(t *target, pid int) error {
				r := b.measured(pid, func() runResult { return closedLoop(ctx, t, p.gcLevel, p.ramp, p.window, p.tail) })
				r.mode = gcMode(s)
				res.add(r)
				b.logf("gc rep %d %-28s %d streams: TTFT p50 %s p99 %s, cpu %s/event, rss %s, %d errors, other load on relay core %.0f%%",
					rep, s.name, p.gcLevel, ms(r.ttft.P50), ms(r.ttft.P99), us(r.cpuPerEvt), mib(r.rssMax), r.errCount(), r.foreign*100)
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}
