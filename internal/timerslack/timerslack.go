// Package timerslack gives every thread of a process that imports it a
// timer slack of 1 ms (HETERPS_TIMER_SLACK), set before the Go runtime
// starts its first thread.
//
// The runtime's monitor thread (sysmon) sleeps 20 µs between its rounds
// for a millisecond or more each time a process that was waiting — for a
// reply, a reduction, its next batch — resumes work: fifty wake-ups that,
// on a core another daemon shares, take the core from that daemon's
// kernels. A one-thread node daemon waits and resumes several times a step,
// and four of them on two cores switched threads 35,000 times a second,
// 40 % of it sysmon. A timer slack lets the kernel defer a sleeping
// thread's wake-up by that much, so sysmon's rounds come at most about a
// thousand a second; the runtime's timers fire through the network poller
// at whole milliseconds already, and nothing else here sleeps on a timer.
//
// The slack is set by a C constructor, which runs before the runtime
// creates sysmon, so every thread inherits it. HETERPS_TIMER_SLACK sets it:
// a whole number of ns, us (or µs) or ms up to 10 ms (a larger slack would
// delay heartbeats and timeouts, and gained nothing), or 0 to leave the
// slack the process inherited. A value it cannot read leaves that slack
// too, and Current says so. A child inherits the slack of the thread
// that forks it: a thread given RestoreThread (package tether's) forks
// children with the slack this process inherited, not this one.
package timerslack

import (
	"fmt"
	"os"
	"time"
)

// Env names the environment variable that sets the slack.
const Env = "HETERPS_TIMER_SLACK"

// Default is the slack a process gets when Env is unset.
const Default = time.Millisecond

// Setting is what the constructor found and did.
type Setting struct {
	Inherited time.Duration // the slack the process started with
	Set       time.Duration // the slack it set; 0 when it left the inherited one
}

// Current returns what the constructor did, and an error naming Env and its
// value when that value could not be read (the inherited slack is kept).
func Current() (Setting, error) {
	s, ok := applied()
	if !ok {
		return s, fmt.Errorf("%s=%q: want 0 or a whole number of ns, us or ms up to 10ms (the timer slack stays %v)",
			Env, os.Getenv(Env), s.Inherited)
	}
	return s, nil
}

// String says what a daemon logs at start.
func (s Setting) String() string {
	if s.Set == 0 {
		return fmt.Sprintf("%v (inherited)", s.Inherited)
	}
	return s.Set.String()
}
