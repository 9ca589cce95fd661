package timerslack

/*
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

static unsigned long hps_slack_inherited; // ns, as the process started
static unsigned long hps_slack_set;       // ns set; 0: left as inherited
static int hps_slack_bad;                 // the variable could not be read

// hps_slack_parse reads "0" or a whole number followed by ns, us (µs) or
// ms, at most 10 ms; it returns -1 for anything else.
static long hps_slack_parse(const char *s) {
	if (s[0] < '0' || s[0] > '9') return -1;
	errno = 0;
	char *end;
	unsigned long v = strtoul(s, &end, 10);
	if (errno != 0) return -1;
	unsigned long unit;
	if (strcmp(end, "ns") == 0) unit = 1;
	else if (strcmp(end, "us") == 0 || strcmp(end, "\xc2\xb5s") == 0) unit = 1000; // us or µs, as Go prints it
	else if (strcmp(end, "ms") == 0) unit = 1000000;
	else if (*end == 0 && v == 0) unit = 1;
	else return -1;
	if (v > 10000000UL / unit) return -1; // 10 ms: more would delay heartbeats and timeouts
	return (long)(v * unit);
}

// Runs before the Go runtime starts any thread, so all of them inherit the
// slack (see the package comment).
__attribute__((constructor)) static void hps_slack_init(void) {
	long cur = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
	hps_slack_inherited = cur > 0 ? (unsigned long)cur : 0;
	const char *env = getenv("HETERPS_TIMER_SLACK");
	long want = 1000000;
	if (env != NULL && env[0] != 0) {
		want = hps_slack_parse(env);
		if (want < 0) {
			hps_slack_bad = 1;
			return;
		}
	}
	if (want > 0 && prctl(PR_SET_TIMERSLACK, (unsigned long)want, 0, 0, 0) == 0) hps_slack_set = (unsigned long)want;
}

static void hps_slack_read(unsigned long *inherited, unsigned long *set, int *bad) {
	*inherited = hps_slack_inherited;
	*set = hps_slack_set;
	*bad = hps_slack_bad;
}

static long hps_slack_thread(void) { return prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0); }
static int hps_slack_set_thread(unsigned long ns) { return prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0); }
*/
import "C"

import (
	"fmt"
	"time"
)

func applied() (Setting, bool) {
	var inherited, set C.ulong
	var bad C.int
	C.hps_slack_read(&inherited, &set, &bad)
	return Setting{Inherited: time.Duration(inherited), Set: time.Duration(set)}, bad == 0
}

// Thread returns the timer slack of the calling thread.
func Thread() time.Duration { return time.Duration(C.hps_slack_thread()) }

// RestoreThread gives the calling thread the slack the process inherited,
// for a thread that forks children (they inherit their forking thread's
// slack): the caller keeps the thread locked for as long as that matters.
func RestoreThread() error {
	s, _ := applied()
	if s.Set == 0 || s.Inherited == 0 {
		return nil
	}
	if C.hps_slack_set_thread(C.ulong(s.Inherited)) != 0 {
		return fmt.Errorf("timer slack: restore %v on a forking thread failed", s.Inherited)
	}
	return nil
}
