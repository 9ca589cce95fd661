package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/heterps/heterps/daemon/api"
	"github.com/heterps/heterps/daemon/apiclient"
)

// errGone says the coordinator no longer knows this node (it was declared
// dead, or the coordinator restarted): register again.
var errGone = errors.New("the coordinator does not know this node")

// errRejected says the coordinator refused a request as malformed (4xx
// other than 404 and 410): retrying it cannot help.
var errRejected = errors.New("the coordinator refused the request")

// control talks to the coordinator's HTTP API. It sends each request
// once: registration retries with its own backoff, heartbeats on their
// ticker.
type control struct {
	client *apiclient.Client
}

func (c *control) register(ctx context.Context, req api.RegisterRequest) (api.RegisterResponse, error) {
	var resp api.RegisterResponse
	err := c.post(ctx, "/v1/nodes/register", req, &resp)
	return resp, err
}

func (c *control) heartbeat(ctx context.Context, id string, hb api.Heartbeat) (api.HeartbeatResponse, error) {
	var resp api.HeartbeatResponse
	err := c.post(ctx, "/v1/nodes/"+id+"/heartbeat", hb, &resp)
	return resp, err
}

// post posts body and classifies a refusal: errGone or errRejected.
func (c *control) post(ctx context.Context, path string, body, out any) error {
	err := c.client.PostJSON(ctx, path, body, out)
	var se *apiclient.StatusError
	if !errors.As(err, &se) {
		return err
	}
	switch {
	case se.Code == http.StatusGone || se.Code == http.StatusNotFound:
		return fmt.Errorf("%w: %w", errGone, err)
	case se.Code/100 == 4:
		return fmt.Errorf("%w: %w", errRejected, err)
	}
	return err
}
