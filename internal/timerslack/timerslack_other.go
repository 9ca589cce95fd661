//go:build !linux

package timerslack

import "time"

func applied() (Setting, bool) { return Setting{}, true }

// Thread returns 0: off Linux there is no timer slack to read.
func Thread() time.Duration { return 0 }

// RestoreThread does nothing off Linux.
func RestoreThread() error { return nil }
