package testtool_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/llmgw/gateway/internal/testing/testtool"
)

// TestMissing runs a test that lacks its tool with CI unset and set, in a
// child process: it skips, then fails.
func TestMissing(t *testing.T) {
	if os.Getenv("TESTTOOL_CHILD") == "1" {
		testtool.Missing(t, "frobnicator not found")
		return
	}
	for _, tc := range []struct {
		ci, want string
		fails    bool
	}{
		{"", "--- SKIP: TestMissing", false},
		{"true", "--- FAIL: TestMissing", true},
	} {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestMissing$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTTOOL_CHILD=1", "CI="+tc.ci)
		out, err := cmd.CombinedOutput()
		if (err != nil) != tc.fails || !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), "frobnicator not found") {
			t.Errorf("CI=%q: err %v, output:\n%s\nwant %q", tc.ci, err, out, tc.want)
		}
	}
}
