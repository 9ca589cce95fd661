package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/heterps/heterps/config"
	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/apiclient"
)

// `heterps profile --submit`: the measured types go to the coordinator as
// a problem file of those types only (PUT /v1/profiles/{model}, TOML), so
// that it never stores a roofline estimate as a measurement.

// measuredOnly is p restricted to the named types (their columns, in p's
// order), without a parameter-server type that may not be among them.
func measuredOnly(p *config.Problem, types []string) *config.Problem {
	out := *p
	out.PSType, out.PSRatio = "", 0
	out.Types, out.Layers = nil, nil
	var cols []int
	for i, t := range p.Types {
		if slices.Contains(types, t.Name) {
			cols = append(cols, i)
			out.Types = append(out.Types, t)
		}
	}
	for _, l := range p.Layers {
		m := l
		m.OCT, m.ODT, m.Alpha, m.Beta = nil, nil, nil, nil
		for _, c := range cols {
			m.OCT = append(m.OCT, l.OCT[c])
			m.ODT = append(m.ODT, l.ODT[c])
			m.Alpha = append(m.Alpha, l.Alpha[c])
			m.Beta = append(m.Beta, l.Beta[c])
		}
		out.Layers = append(out.Layers, m)
	}
	return &out
}

// submitProfile sends a profile of model (its measured types only) to the
// coordinator and says what it stored.
func submitProfile(ctx context.Context, f *profileFlags, model string, p *config.Problem, stderr io.Writer) error {
	body, err := p.MarshalTOML()
	if err != nil {
		return err
	}
	names := make([]string, len(p.Types))
	for i, t := range p.Types {
		names[i] = t.Name
	}
	body = append([]byte(fmt.Sprintf("# heterps profile --model %s, B_o = %d, measured: %s\n", f.model, p.ProfileBatch, strings.Join(names, ", "))), body...)
	c, err := f.coord.client()
	if err != nil {
		return usageError{err}
	}
	defer c.close()
	c.retryFor(requestRetryFor, stderr)
	r, err := c.putProfile(ctx, model, body)
	if err != nil {
		return fmt.Errorf("profile: --submit: %w", err)
	}
	for _, s := range r.Stored {
		fmt.Fprintf(stderr, "profile: the coordinator stored model %s on type %s (%d layers at B_o = %d)\n", s.Model, s.Type, s.Layers, s.ProfileBatch)
	}
	if len(r.NotInCatalog) > 0 {
		fmt.Fprintf(stderr, "profile: warning: the coordinator's catalog has no type %s: its jobs do not plan on it\n", strings.Join(r.NotInCatalog, ", "))
	}
	return nil
}

// putProfile stores a profile of model at the coordinator (PUT
// /v1/profiles/{model}); the same body sent again replaces it alike.
func (c *coordClient) putProfile(ctx context.Context, model string, body []byte) (api.ProfilePutResponse, error) {
	var r api.ProfilePutResponse
	err := c.Do(ctx, apiclient.Request{Method: http.MethodPut, Path: "/v1/profiles/" + url.PathEscape(model),
		ContentType: api.ContentTypeTOML, Body: body}, &r)
	return r, err
}

// profiles lists the coordinator's stored profiles (GET /v1/profiles).
func (c *coordClient) profiles(ctx context.Context) ([]api.Profile, error) {
	var ps []api.Profile
	err := c.Get(ctx, "/v1/profiles", &ps)
	return ps, err
}

const forgetUsage = "usage: heterps profile forget MODEL [TYPE] [--coordinator URL] [--secret-file F] [--tls-cert F --tls-key F --tls-ca F] [--json]\n" +
	"  the coordinator forgets the profiles it stores for MODEL (on TYPE only, if given): its jobs plan on estimates again"

// runForgetProfiles makes the coordinator forget stored profiles, e.g.
// after the machines of a type changed (DELETE /v1/profiles/{model}[/{type}]).
func runForgetProfiles(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return control[[]api.Profile]{name: "profile forget", usage: forgetUsage, jsonHelp: "print the forgotten profiles as JSON",
		check: func(args []string) error {
			if len(args) < 1 || len(args) > 2 || slices.Contains(args, "") {
				return fmt.Errorf("want MODEL and maybe TYPE, got %q", args)
			}
			return nil
		},
		act: func(ctx context.Context, c *coordClient, args []string) ([]api.Profile, string, error) {
			path := "/v1/profiles/" + url.PathEscape(args[0])
			if len(args) == 2 {
				path += "/" + url.PathEscape(args[1])
			}
			var gone []api.Profile
			if err := c.Delete(ctx, path, &gone); err != nil {
				return nil, "", err
			}
			names := make([]string, len(gone))
			for i, p := range gone {
				names[i] = p.Model + " on " + p.Type
			}
			return gone, "forgot the profiles of " + strings.Join(names, ", "), nil
		}}.run(ctx, args, stdout, stderr)
}
