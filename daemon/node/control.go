package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/heterps/heterps/daemon/api"
)

// errGone says the coordinator no longer knows this node (it was declared
// dead, or the coordinator restarted): register again.
var errGone = errors.New("the coordinator does not know this node")

// errRejected says the coordinator refused a request as malformed (4xx
// other than 404 and 410): retrying it cannot help.
var errRejected = errors.New("the coordinator refused the request")

// control talks to the coordinator's HTTP API.
type control struct {
	base   string // the coordinator's URL, without a trailing slash
	client *http.Client
	key    []byte // api.ControlKey of the cluster secret; nil: requests go unsigned
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

// maxReply bounds a reply body: task lists carry model files.
const maxReply = 64 << 20

func (c *control) post(ctx context.Context, path string, body, out any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(c.base, "/")+path, bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	req.Header.Set("Content-Type", api.ContentTypeJSON)
	if c.key != nil {
		api.Sign(req, raw, c.key, time.Now())
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if err != nil {
		return fmt.Errorf("coordinator: %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e api.Error
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		err := fmt.Errorf("coordinator: %s: %s: %s", path, resp.Status, msg)
		switch {
		case resp.StatusCode == http.StatusGone || resp.StatusCode == http.StatusNotFound:
			err = fmt.Errorf("%w: %w", errGone, err)
		case resp.StatusCode/100 == 4:
			err = fmt.Errorf("%w: %w", errRejected, err)
		}
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("coordinator: %s: reply: %w", path, err)
	}
	return nil
}
