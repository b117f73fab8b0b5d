// Package testtool is the one rule for a test that needs a tool this
// machine may lack (Node.js and the npm packages, unshare): where CI is
// set, the test fails, because CI must run it (`make test` installs what
// it needs); anywhere else it skips, saying what to install.
package testtool

import (
	"fmt"
	"os"
	"testing"
)

// Missing ends t because what it needs is not installed: t.Fatal in CI (the
// CI environment variable is set, as CI services and .ci/run set it),
// t.Skip elsewhere. The message says what is missing and how to get it.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " (CI is set, so this fails instead of skipping)")
	}
	t.Skip(msg + " (not run: set CI to make this a failure)")
}
