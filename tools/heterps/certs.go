package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/heterps/heterps/daemon/wire/pki"
)

func init() {
	register("certs", "make the cluster CA and per-machine certificates for mutual TLS", func(args []string) int {
		return runCerts(args, os.Stdout, os.Stderr)
	})
}

const certsUsage = `usage: heterps certs init [--dir D] [--days N]
       heterps certs issue NAME --host H[,H...] [--dir D] [--days N]
  init writes the cluster CA (D/ca.pem, D/ca-key.pem); issue writes D/NAME.pem and D/NAME-key.pem
  signed by it, valid for the given host names and IP addresses (what peers dial) as server and client.
  Keys are written with mode 0600; nothing is overwritten.`

type certsFlags struct {
	dir   string
	days  int
	hosts string
	rest  []string
}

func parseCertsFlags(args []string, stderr io.Writer) (*certsFlags, error) {
	f := &certsFlags{}
	fs := flag.NewFlagSet("certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, certsUsage); fs.PrintDefaults() }
	fs.StringVar(&f.dir, "dir", "certs", "directory of the CA and certificates")
	fs.IntVar(&f.days, "days", 0, "validity in days (default: 3650 for the CA, 825 for a certificate)")
	fs.StringVar(&f.hosts, "host", "", "issue: comma-separated host names and IP addresses of the machine")
	var err error
	f.rest, err = parseInterspersed(fs, args)
	return f, err
}

func runCerts(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "init" && args[0] != "issue") {
		fmt.Fprintln(stderr, certsUsage)
		return exitUsage
	}
	f, err := parseCertsFlags(args[1:], stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	if f.days < 0 {
		return fail(exitUsage, fmt.Errorf("certs: --days %d: want a positive number", f.days))
	}
	if args[0] == "init" {
		return certsInit(f, stdout)
	}
	return certsIssue(f, stdout)
}

func validity(days, def int) time.Duration {
	if days == 0 {
		days = def
	}
	return time.Duration(days) * 24 * time.Hour
}

func certsInit(f *certsFlags, stdout io.Writer) int {
	if len(f.rest) != 0 {
		return fail(exitUsage, fmt.Errorf("certs init: unexpected arguments %q", f.rest))
	}
	ca, err := pki.NewCA("heterps cluster CA", time.Now(), validity(f.days, 3650))
	if err != nil {
		return fail(exitFailure, err)
	}
	cert, key, err := pki.Write(ca, f.dir, "ca")
	if err != nil {
		return fail(exitUsage, err)
	}
	fmt.Fprintf(stdout, "cluster CA: %s (copy to every machine as tls_ca)\nCA key: %s (keep it off the cluster's machines)\n", cert, key)
	return exitOK
}

func certsIssue(f *certsFlags, stdout io.Writer) int {
	if len(f.rest) != 1 {
		return fail(exitUsage, errors.New("certs issue: want exactly one NAME"))
	}
	name := f.rest[0]
	if strings.ContainsAny(name, `/\`) || name == "ca" || strings.HasPrefix(name, ".") {
		return fail(exitUsage, fmt.Errorf("certs issue: name %q: want a plain file name other than ca", name))
	}
	var hosts []string
	for _, h := range strings.Split(f.hosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 {
		return fail(exitUsage, errors.New("certs issue: --host is required (the names and addresses peers dial)"))
	}
	ca, err := pki.Read(f.dir, "ca")
	if err != nil {
		return fail(exitUsage, fmt.Errorf("certs issue: run `heterps certs init --dir %s` first: %w", f.dir, err))
	}
	pair, err := pki.Issue(ca, name, hosts, time.Now(), validity(f.days, 825))
	if err != nil {
		return fail(exitUsage, err)
	}
	cert, key, err := pki.Write(pair, f.dir, name)
	if err != nil {
		return fail(exitUsage, err)
	}
	fmt.Fprintf(stdout, "certificate: %s (tls_cert)\nkey: %s (tls_key, mode 0600)\nhosts: %s\n", cert, key, strings.Join(hosts, ", "))
	return exitOK
}
