package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"syscall"
)

// Standard input as a lifeline (--stop-on-stdin-close): heterps launch
// starts daemons through a remote shell (ssh, oarsh, srun) and keeps a pipe
// to each one's standard input open; should launch be killed outright,
// the pipe closes, the remote shell ends, and the daemon reads the end of
// its input — where ending the local ssh does not end the remote process.
// A daemon stops then as on SIGTERM. The lifeline holds only once a byte
// has come through it (launch writes one at the start): a remote shell
// that does not forward standard input gives an empty one at once, and the
// daemon then runs on as without the flag.

// watchLifeline reads in until it ends and reports whether the lifeline
// was cut: whether anything came through before the end.
func watchLifeline(in io.Reader) (cut bool) {
	buf := make([]byte, 512)
	armed := false
	for {
		n, err := in.Read(buf)
		armed = armed || n > 0
		if err != nil {
			return armed
		}
	}
}

// stopOnLifelineCut stops the daemon as SIGTERM does when in, once it has
// carried something, ends; ctx is the daemon's (a daemon already stopping
// is not signalled again: a second SIGTERM would kill it at once). The
// goroutine ends with in, or with the process: a read of standard input
// cannot be interrupted.
func stopOnLifelineCut(ctx context.Context, in io.Reader, log *slog.Logger) {
	go func() {
		if !watchLifeline(in) {
			log.Info("standard input ended before it carried anything: not watched (--stop-on-stdin-close)")
			return
		}
		if ctx.Err() != nil {
			return
		}
		log.Warn("standard input closed: the process that started this daemon is gone; stopping (--stop-on-stdin-close)")
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}()
}
