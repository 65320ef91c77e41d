package main

import (
	"os"
	"testing"
)

// TestGenerated fails when sums_mix_amd64.s is not what the generator
// writes: regenerate with go generate ./checksum/.
func TestGenerated(t *testing.T) {
	have, err := os.ReadFile("../../sums_mix_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	if string(have) != generate(defaults) {
		t.Fatal("checksum/sums_mix_amd64.s is not what internal/mixgen writes: run go generate ./checksum/")
	}
}
