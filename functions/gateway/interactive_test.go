//go:build unix

package main

// The agents as their users run them all day: interactively, in a
// pseudo-terminal (a tmux server of the test's own), behind the recording
// proxy, with the settings docs/clients.md gives.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testing/testtool"
	"github.com/llmgw/gateway/scripts/stub"
)

// paneWait bounds each wait on what an agent shows: generous, so that a
// busy two-core machine (an agent's start alone takes seconds there) is
// not a failure.
const paneWait = 3 * time.Minute

// tmuxPane is one agent running in a pseudo-terminal: a tmux server of
// the test's own (its socket in a directory of its own, no user config),
// one 200x50 window whose pane stays after the agent exits, so that the
// test reads its exit status. The test ends it, and every process left in
// the agent's process group, by PID.
type tmuxPane struct {
	tmux, sock string
	pid        int // the agent: the pane's process, its process group's leader
}

// startPane runs argv in dir with env (the tmux server's environment,
// which the pane inherits; tmux sets TERM). It fails in CI and skips
// elsewhere (testtool.Missing) where tmux is not installed.
func startPane(t *testing.T, dir string, env []string, argv ...string) *tmuxPane {
	t.Helper()
	bin, err := exec.LookPath("tmux")
	if err != nil {
		testtool.Missing(t, "tmux missing (the interactive agents run in its pseudo-terminal): run `make tmux`: %v", err)
	}
	// A unix socket's path is at most 107 bytes: not under t.TempDir().
	tmp, err := os.MkdirTemp("", "tmux")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	conf := filepath.Join(tmp, "tmux.conf")
	if err := os.WriteFile(conf, []byte("set -g remain-on-exit on\nset -g history-limit 50000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &tmuxPane{tmux: bin, sock: filepath.Join(tmp, "s")}
	cmd := exec.Command(bin, append([]string{"-S", p.sock, "-f", conf, "new-session", "-d", "-s", "agent", "-x", "200", "-y", "50", "-c", dir}, argv...)...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	t.Cleanup(p.stop)
	pid, err := strconv.Atoi(strings.TrimSpace(p.run(t, "display-message", "-p", "-t", "agent", "#{pane_pid}")))
	if err != nil || pid <= 1 {
		t.Fatalf("the pane's process: %v", err)
	}
	p.pid = pid
	return p
}

// run runs a tmux command on the test's server and returns its output.
func (p *tmuxPane) run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(p.tmux, append([]string{"-S", p.sock}, args...)...).Output()
	if err != nil {
		t.Fatalf("tmux %q: %v", args, err)
	}
	return string(out)
}

// stop kills what is left of the agent's process group and the tmux
// server.
func (p *tmuxPane) stop() {
	if p.pid > 1 {
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	}
	_ = exec.Command(p.tmux, "-S", p.sock, "kill-server").Run()
}

// screen is the pane's whole history and screen, wrapped lines joined.
func (p *tmuxPane) screen(t *testing.T) string {
	t.Helper()
	return p.run(t, "capture-pane", "-p", "-J", "-S", "-", "-t", "agent")
}

// waitFor polls the pane until cond holds of its contents, and fails the
// test with them after paneWait.
func (p *tmuxPane) waitFor(t *testing.T, what string, cond func(screen string) bool) string {
	t.Helper()
	deadline := time.Now().Add(paneWait)
	for {
		s := p.screen(t)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s; the pane shows:\n%s", paneWait, what, s)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// send types text, waits until the pane shows shown once more than
// before (the input box echoes it; the agent may render the text
// differently, as Claude Code drops backquotes), then presses Enter.
func (p *tmuxPane) send(t *testing.T, text, shown string) {
	t.Helper()
	before := strings.Count(p.screen(t), shown)
	p.run(t, "send-keys", "-t", "agent", "-l", text)
	p.waitFor(t, fmt.Sprintf("the input %q", shown), func(s string) bool { return strings.Count(s, shown) > before })
	p.run(t, "send-keys", "-t", "agent", "Enter")
}

// exited waits until the agent has exited and returns its exit status.
func (p *tmuxPane) exited(t *testing.T) int {
	t.Helper()
	deadline := time.Now().Add(paneWait)
	for {
		dead, status, _ := strings.Cut(strings.TrimSpace(p.run(t, "display-message", "-p", "-t", "agent", "#{pane_dead} #{pane_dead_status}")), " ")
		if dead == "1" {
			n, _ := strconv.Atoi(status)
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not exit within %v; the pane shows:\n%s", paneWait, p.screen(t))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// leftovers is what is left of the agent's process group a while after
// it exited (its children may take a moment to follow it): the live
// processes, zombies not counted (a container's init may never reap
// them); where there is no /proc, whether the group still exists.
func (p *tmuxPane) leftovers() []string {
	var live []string
	deadline := time.Now().Add(time.Minute)
	for {
		live = live[:0]
		stats, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, f := range stats {
			b, err := os.ReadFile(f)
			i := strings.LastIndexByte(string(b), ')')
			if err != nil || i < 0 {
				continue
			}
			// After the command's name: state, ppid, pgrp.
			if fields := strings.Fields(string(b[i+1:])); len(fields) > 2 && fields[0] != "Z" && fields[2] == strconv.Itoa(p.pid) {
				live = append(live, string(b[:i+1]))
			}
		}
		if len(stats) == 0 && !errors.Is(syscall.Kill(-p.pid, 0), syscall.ESRCH) {
			live = append(live, fmt.Sprintf("process group %d", p.pid))
		}
		if len(live) == 0 || time.Now().After(deadline) {
			return live
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// lastTurnTexts is the text of a Messages or Responses request's last
// message: its string content or its text blocks.
func lastTurnTexts(body []byte) []string {
	var req struct {
		Messages []json.RawMessage `json:"messages"`
		Input    []json.RawMessage `json:"input"`
	}
	_ = json.Unmarshal(body, &req)
	msgs := append(req.Messages, req.Input...)
	if len(msgs) == 0 {
		return nil
	}
	var m struct {
		Content json.RawMessage `json:"content"`
	}
	_ = json.Unmarshal(msgs[len(msgs)-1], &m)
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return []string{s}
	}
	var blocks []struct{ Type, Text string }
	_ = json.Unmarshal(m.Content, &blocks)
	var out []string
	for _, b := range blocks {
		if b.Text != "" {
			out = append(out, b.Text)
		}
	}
	return out
}

// lastTurnHas reports whether a request's last message has a text that
// contains s.
func lastTurnHas(body []byte, s string) bool {
	for _, t := range lastTurnTexts(body) {
		if strings.Contains(t, s) {
			return true
		}
	}
	return false
}

// compacted checks the requests an agent's /compact sent: at least one
// asks for the summary (its last message holds prompt), at most most in
// all. screen is what the pane showed, for the failure.
func compacted(t *testing.T, all []stub.RecordedRequest, prompt string, most int, screen string) {
	t.Helper()
	// The agent's requests: not the gateway's own counts, which a token
	// budget asks for a prompt bound above budget.count_above (a
	// summary request resends the whole conversation).
	var reqs []stub.RecordedRequest
	for _, r := range all {
		if !strings.HasSuffix(r.Path, "/count_tokens") && !strings.HasSuffix(r.Path, "/input_tokens") {
			reqs = append(reqs, r)
		}
	}
	var summaries int
	for _, r := range reqs {
		if lastTurnHas(r.Body, prompt) {
			summaries++
		}
	}
	t.Logf("/compact: %d requests, %d of them the summary's", len(reqs), summaries)
	if summaries == 0 || len(reqs) > most {
		t.Errorf("/compact took %d requests (%d asking for the summary), want 1 to %d:\n%s", len(reqs), summaries, most, screen)
	}
}

// TestClaudeCodeInteractive runs Claude Code as its users do, in a
// terminal, on the headless test's gateway and tenant: a turn with its
// Bash tool, a turn that starts a subagent (the Agent tool; the stub
// answers the subagent in text), /compact, /exit. The first-run dialogs
// are answered ahead in CLAUDE_CONFIG_DIR/.claude.json (onboarding done,
// the working directory trusted), as a user's earlier runs would have.
// With docs/clients.md's settings, CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL
// among them, the recording proxy sees no connection at all (without that
// one, every interactive start opens downloads.claude.ai and github.com).
// /compact's summary request is answered in text, as Anthropic answers
// it, and takes a handful of requests (the stub once answered it with a
// tool call, and /compact failed with "summarization produced empty
// response"). It leaves no process behind.
func TestClaudeCodeInteractive(t *testing.T) {
	t.Parallel()
	claude := claudeCode(t)
	st, g := claudeCodeGateway(t)
	home := t.TempDir()
	work := filepath.Join(home, "work")
	seed, _ := json.Marshal(map[string]any{
		"hasCompletedOnboarding": true, "theme": "dark",
		"projects": map[string]any{work: map[string]any{"hasTrustDialogAccepted": true, "hasCompletedProjectOnboarding": true}},
	})
	for _, err := range []error{os.MkdirAll(work, 0o700), os.MkdirAll(filepath.Join(home, ".claude"), 0o700),
		os.WriteFile(filepath.Join(home, ".claude", ".claude.json"), seed, 0o600)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	eg := newEgress(t)
	start := time.Now()
	p := startPane(t, work, append(claudeEnv(t, g, "coder", home, true), eg.env()...), claude, "--allowedTools", "Bash(echo:*)")
	p.waitFor(t, "Claude Code's prompt", func(s string) bool { return strings.Contains(s, "? for shortcuts") })

	answer := strings.TrimSpace(strings.Repeat(" tok", 8))
	reqs := func(from int) []stub.RecordedRequest { return st.Requests()[from:] }
	seen := func(from int, what func(body []byte) bool) bool {
		for _, r := range reqs(from) {
			if what(r.Body) {
				return true
			}
		}
		return false
	}
	if !t.Run("a turn with a tool", func(t *testing.T) {
		p.send(t, "Use the Bash tool to run `echo stub`, then say what it printed.", "Use the Bash tool")
		p.waitFor(t, "the answer after the Bash tool ran", func(s string) bool {
			return strings.Contains(s, answer) && seen(0, func(b []byte) bool {
				return strings.Contains(string(b), `"type":"tool_result"`) && strings.Contains(string(b), `"content":"stub`)
			})
		})
	}) {
		return // the session is in no known state
	}
	if !t.Run("a subagent", func(t *testing.T) {
		from := len(st.Requests())
		p.send(t, "Use the Agent tool to look around.", "Use the Agent tool")
		p.waitFor(t, "the subagent's request and the answer", func(s string) bool {
			return strings.Count(s, answer) >= 2 && seen(from, func(b []byte) bool {
				return slices.Contains(lastTurnTexts(b), stub.SubagentPrompt)
			})
		})
	}) {
		return
	}
	t.Run("/compact", func(t *testing.T) {
		from := len(st.Requests())
		p.send(t, "/compact", "/compact")
		s := p.waitFor(t, "the compaction", func(s string) bool {
			return strings.Contains(s, "Compacted") || strings.Contains(s, "Error during compaction")
		})
		compacted(t, reqs(from), "Your task is to create a detailed summary", 5, s)
		if strings.Contains(s, "Error during compaction") {
			t.Errorf("/compact failed:\n%s", s)
		}
	})
	p.send(t, "/exit", "/exit")
	if status := p.exited(t); status != 0 {
		t.Errorf("claude exited %d:\n%s", status, p.screen(t))
	}
	t.Logf("interactive session: %v, %d requests", time.Since(start).Round(time.Second), len(st.Requests()))
	if left := p.leftovers(); len(left) > 0 {
		t.Errorf("processes of Claude Code's group outlived it by a minute: %q", left)
	}
	eg.check(t, "interactive Claude Code")
	for _, l := range tenantLog(g, "coder") {
		if l["status"] != 200.0 || l["outcome"] != "ok" {
			t.Errorf("access log %v", l)
		}
	}
}

// announcementTip is the one connection outside the gateway the Codex TUI
// opens whatever its config says: at every start it fetches
// raw.githubusercontent.com/openai/codex/main/announcement_tip.toml for
// its startup tip, and 0.171 has no config key or environment variable
// that stops it (docs/clients.md says so).
const announcementTip = "CONNECT raw.githubusercontent.com:443"

// TestCodexTUI runs Codex's TUI as its users do, in a terminal, on its
// default model (code mode, as TestCodexApplyPatch): a turn in which it
// applies the stub's patch, /compact (local compaction: the provider is
// not named Azure or OpenAI; the stub answers the summary prompt in
// text, in one request), /quit. The directory's trust is set in
// config.toml, as the TUI's trust screen would. With docs/clients.md's
// config, daemon_auto_start = false among it, the TUI starts no
// app-server daemon (without it one outlives the TUI, the token in its
// environment) and leaves no process behind; the recording proxy sees the
// announcement fetch and nothing else.
func TestCodexTUI(t *testing.T) {
	t.Parallel()
	g := startGateway(t, options{stubOpts: stub.Options{Tokens: 12}, extra: "aliases: {gpt-6.2-sol: llama}\n"})
	work := t.TempDir()
	dir, home, env := codexSetup(t, g, codexRun{tenant: "contoso", model: "gpt-6.2-sol",
		tables: fmt.Sprintf("\n[projects.%q]\ntrust_level = \"trusted\"\n", work)})
	eg := newEgress(t)
	start := time.Now()
	p := startPane(t, work, append(env, eg.env()...), filepath.Join(dir, "bin", "codex"))
	t.Cleanup(func() { stopDaemon(t, dir, home, env) })
	p.waitFor(t, "Codex's prompt", func(s string) bool { return strings.Contains(s, "? for shortcuts") })

	answer := strings.TrimSpace(strings.Repeat(" tok", 12))
	reqs := func(from int) []stub.RecordedRequest { return g.Stubs[0].Requests()[from:] }
	if !t.Run("apply_patch", func(t *testing.T) {
		p.send(t, "Use apply_patch to add the file "+stub.StubPatchFile+".", "Use apply_patch")
		p.waitFor(t, "the patched file and the answer", func(s string) bool {
			b, err := os.ReadFile(filepath.Join(work, stub.StubPatchFile))
			return err == nil && strings.TrimSpace(string(b)) == stub.StubPatchText && strings.Contains(s, answer)
		})
		var output bool
		for _, r := range reqs(0) {
			output = output || strings.Contains(string(r.Body), `"custom_tool_call_output"`)
		}
		if !output {
			t.Errorf("no request carried the patch call's output")
		}
	}) {
		return // the session is in no known state
	}
	t.Run("/compact", func(t *testing.T) {
		from := len(reqs(0))
		p.send(t, "/compact", "/compact")
		s := p.waitFor(t, "the compaction", func(s string) bool { return strings.Contains(s, "Context compacted") })
		compacted(t, reqs(from), "CONTEXT CHECKPOINT COMPACTION", 3, s)
	})
	p.send(t, "/quit", "/quit")
	if status := p.exited(t); status != 0 {
		t.Errorf("codex exited %d:\n%s", status, p.screen(t))
	}
	t.Logf("TUI session: %v, %d requests", time.Since(start).Round(time.Second), len(reqs(0)))
	if left := p.leftovers(); len(left) > 0 {
		t.Errorf("processes of the TUI's group outlived it by a minute: %q", left)
	}
	if _, err := os.Stat(filepath.Join(home, "app-server-daemon", "daemon.pid")); err == nil {
		t.Errorf("the TUI started an app-server daemon (daemon_auto_start = false should keep it from doing so)")
	}
	eg.check(t, "the Codex TUI", announcementTip)
}

// stopDaemon stops an app-server daemon the test's Codex started, should
// one run (the test fails then): `codex app-server daemon stop`, then a
// kill of each process its pid files under CODEX_HOME name and whose
// command line is under CODEX_HOME (a binary only this test's Codex
// installed there; the stop leaves the daemon's pid-update loop
// running).
func stopDaemon(t *testing.T, dir, home string, env []string) {
	files, _ := filepath.Glob(filepath.Join(home, "app-server-daemon", "*.pid"))
	if len(files) == 0 {
		return
	}
	cmd := exec.Command(filepath.Join(dir, "bin", "codex"), "app-server", "daemon", "stop")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Logf("codex app-server daemon stop: %v: %s", err, out)
	}
	for _, f := range files {
		var pf struct {
			PID int `json:"pid"`
		}
		if b, err := os.ReadFile(f); err != nil || json.Unmarshal(b, &pf) != nil || pf.PID <= 1 {
			continue
		}
		if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pf.PID)); err == nil && strings.HasPrefix(string(cmdline), home+string(filepath.Separator)) {
			_ = syscall.Kill(pf.PID, syscall.SIGKILL)
		}
	}
}
