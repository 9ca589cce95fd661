package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/wire"
	"github.com/heterps/heterps/daemon/wire/pki"
	"github.com/heterps/heterps/internal/syncbuf"
)

// issueCerts writes a cluster CA and certificates for names (all on
// 127.0.0.1) into dir, as `heterps certs` does.
func issueCerts(t *testing.T, dir string, names ...string) {
	t.Helper()
	ca, err := pki.NewCA("test", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := pki.Write(ca, dir, "ca"); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		p, err := pki.Issue(ca, n, []string{"127.0.0.1"}, time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := pki.Write(p, dir, n); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMutualTLSCluster: a coordinator and two nodes with certificates and
// no secret run a two-stage job (PS and stage links in TLS) over an https
// API that refuses a client without a certificate.
func TestMutualTLSCluster(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	dir := t.TempDir()
	issueCerts(t, dir, "coord", "cpu", "gpu", "cli")
	pem := func(n string) (string, string) { return filepath.Join(dir, n+".pem"), filepath.Join(dir, n+"-key.pem") }
	ca := filepath.Join(dir, "ca.pem")
	var logs, coordOut syncbuf.Buffer
	cert, key := pem("coord")
	wg.Go(func() {
		run(ctx, []string{"--role=coordinator", "--catalog", "testdata/catalog.toml", "--listen", "127.0.0.1:0", "--heartbeat", "100ms",
			"--state-dir", t.TempDir(), "--tls-cert", cert, "--tls-key", key, "--tls-ca", ca}, &coordOut, &logs)
	})
	url, ok := strings.CutPrefix(waitLine(t, &coordOut), "coordinator ")
	if !ok || !strings.HasPrefix(url, "https://") {
		t.Fatalf("coordinator printed %q", coordOut.String())
	}
	for _, typ := range []string{"cpu", "gpu"} {
		cert, key := pem(typ)
		path := filepath.Join(dir, typ+".toml")
		src := fmt.Sprintf("version = 1\nname = %q\ncoordinator = %q\nlisten = \"127.0.0.1:0\"\nps_listen = \"127.0.0.1:0\"\ntype = %q\nunits = 1\n"+
			"tls_cert = %q\ntls_key = %q\ntls_ca = %q\n", typ, strings.TrimPrefix(url, "https://"), typ, cert, key, ca)
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		var out syncbuf.Buffer
		wg.Go(func() { run(ctx, []string{"--role=node", "--config", path}, &out, &logs) })
	}

	if resp, err := http.Get(url + "/v1/nodes"); err == nil {
		resp.Body.Close()
		t.Fatalf("a client without a certificate got %s", resp.Status)
	}
	cliCert, cliKey := pem("cli")
	tlsCfg, err := wire.LoadTLS(cliCert, cliKey, ca)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	model, err := filepath.Abs("testdata/tiny.toml")
	if err != nil {
		t.Fatal(err)
	}
	job := fmt.Sprintf("version = 1\nname = \"tiny\"\nmodel = %q\ndata = \"synthetic:1\"\nbatch = 64\nsteps = 20\nthroughput_limit = 1\nmethod = \"heuristic\"\nmode = \"bsp\"\nseed = 3\n", model)
	var s api.JobStatus
	deadline := time.Now().Add(60 * time.Second)
	for s.ID == "" || !s.State.Final() {
		if time.Now().After(deadline) {
			t.Fatalf("job %+v; logs:\n%s", s, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
		if s.ID == "" {
			var nodes []api.NodeStatus
			if getJSON(t, client, url+"/v1/nodes", &nodes); len(nodes) < 2 {
				continue
			}
			resp, err := client.Post(url+"/v1/jobs", api.ContentTypeTOML, strings.NewReader(job))
			if err != nil {
				t.Fatal(err)
			}
			var sub api.SubmitResponse
			json.NewDecoder(resp.Body).Decode(&sub)
			resp.Body.Close()
			if s.ID = sub.JobID; s.ID == "" {
				t.Fatalf("submit: %s", resp.Status)
			}
			continue
		}
		getJSON(t, client, url+"/v1/jobs/"+s.ID, &s)
	}
	if s.State != api.JobDone || s.Step != 20 || len(s.Stages) != 2 {
		t.Fatalf("job ended %s at step %d with %d stages (%s); logs:\n%s", s.State, s.Step, len(s.Stages), s.Reason, logs.String())
	}
}

func getJSON(t *testing.T, c *http.Client, url string, v any) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(v)
}
