package main

import (
	"os"
	"testing"
)

// TestMain runs the test binary as heterps when a test started it as a
// child process of a command (profile's replica processes).
func TestMain(m *testing.M) {
	if os.Getenv(asHeterpsEnv) == "1" {
		os.Exit(dispatch(os.Args[1:]))
	}
	os.Exit(m.Run())
}
