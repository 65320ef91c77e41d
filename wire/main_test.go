package wire

import (
	"os"
	"testing"

	"github.com/kvaudit/kvaudit/internal/testlong"
)

// TestMain makes the property tests' runs short unless KVAUDIT_LONG_TESTS
// is set or -rapid.checks given (internal/testlong).
func TestMain(m *testing.M) { os.Exit(testlong.Main(m)) }
