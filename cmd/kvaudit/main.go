// Command kvaudit audits KV cache transfers of disaggregated LLM serving:
// it checksums KV cache dumps, compares producers and consumers, and injects
// faults to prove the checks catch them. See `kvaudit --help`.
package main

import (
	"os"

	"github.com/kvaudit/kvaudit/cmd/kvaudit/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.SystemStreams()))
}
