package autoscale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/smithy-go"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

const (
	testKeyID  = "AKIDFARMTEST"
	testSecret = "farm-test-secret-must-never-be-logged"
	testGroup  = "farm-consumers"
)

// asgCall is one request the fake Auto Scaling endpoint received.
type asgCall struct {
	form url.Values
	auth string
}

func (c asgCall) get(k string) string { return c.form.Get(k) }

// fakeASG is a local Auto Scaling endpoint speaking the AWS Query protocol.
// Each request takes the next scripted reply; when the script is empty it
// succeeds.
type fakeASG struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls []asgCall
	// replies are (HTTP status, error code, message); status 0 is success.
	replies []asgReply
	// desired is the group's desired capacity: DescribeAutoScalingGroups
	// answers it, a successful SetDesiredCapacity sets it. With noGroup,
	// DescribeAutoScalingGroups finds no group.
	desired int
	noGroup bool
	// minSize and maxSize bound desired as a group does: SetDesiredCapacity
	// outside them is a ValidationError. Zero maxSize: 100.
	minSize, maxSize int
}

type asgReply struct {
	status  int
	code    string
	message string
}

func newFakeASG(t *testing.T, replies ...asgReply) *fakeASG {
	f := &fakeASG{replies: replies}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeASG) serve(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.Method != http.MethodPost {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.calls = append(f.calls, asgCall{form: r.PostForm, auth: r.Header.Get("Authorization")})
	var reply asgReply
	if len(f.replies) > 0 {
		reply, f.replies = f.replies[0], f.replies[1:]
	}
	action := r.PostForm.Get("Action")
	maxSize := f.maxSize
	if maxSize == 0 {
		maxSize = 100
	}
	if n, err := strconv.Atoi(r.PostForm.Get("DesiredCapacity")); reply.status == 0 && action == "SetDesiredCapacity" && err == nil && n > maxSize {
		reply = asgReply{400, "ValidationError", fmt.Sprintf("New SetDesiredCapacity value %d is above max value %d for the AutoScalingGroup.", n, maxSize)}
	} else if reply.status == 0 && action == "SetDesiredCapacity" && err == nil && n < f.minSize {
		reply = asgReply{400, "ValidationError", fmt.Sprintf("New SetDesiredCapacity value %d is below min value %d for the AutoScalingGroup.", n, f.minSize)}
	}
	result := ""
	switch {
	case reply.status != 0:
	case action == "SetInstanceProtection":
		result = "<SetInstanceProtectionResult/>"
	case action == "SetDesiredCapacity":
		f.desired, _ = strconv.Atoi(r.PostForm.Get("DesiredCapacity"))
	case action == "DescribeAutoScalingGroups" && !f.noGroup:
		result = fmt.Sprintf(`<DescribeAutoScalingGroupsResult><AutoScalingGroups><member>`+
			`<AutoScalingGroupName>%s</AutoScalingGroupName><DesiredCapacity>%d</DesiredCapacity>`+
			`<MinSize>%d</MinSize><MaxSize>%d</MaxSize></member></AutoScalingGroups></DescribeAutoScalingGroupsResult>`,
			r.PostForm.Get("AutoScalingGroupNames.member.1"), f.desired, f.minSize, maxSize)
	case action == "DescribeAutoScalingGroups":
		result = `<DescribeAutoScalingGroupsResult><AutoScalingGroups/></DescribeAutoScalingGroupsResult>`
	}
	f.mu.Unlock()

	w.Header().Set("Content-Type", "text/xml")
	if reply.status != 0 {
		w.WriteHeader(reply.status)
		fmt.Fprintf(w, `<ErrorResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">`+
			`<Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error>`+
			`<RequestId>req-err</RequestId></ErrorResponse>`, reply.code, reply.message)
		return
	}
	fmt.Fprintf(w, `<%sResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/">%s`+
		`<ResponseMetadata><RequestId>req-ok</RequestId></ResponseMetadata></%sResponse>`, action, result, action)
}

func (f *fakeASG) Calls() []asgCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]asgCall(nil), f.calls...)
}

// fakeIMDS is a local IMDSv2: a token from PUT /latest/api/token is
// required for every metadata GET.
type fakeIMDS struct {
	srv *httptest.Server
	mu  sync.Mutex
	// tokens counts token PUTs, gets authorised GETs, rejected unauthorised
	// ones.
	tokens, gets, rejected int
	refuseTokens           bool
}

const (
	imdsToken      = "imds-token-abc"
	testInstanceID = "i-0123456789abcdef0"
)

func newFakeIMDS(t *testing.T) *fakeIMDS {
	f := &fakeIMDS{}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeIMDS) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
		if f.refuseTokens {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		if r.Header.Get("X-Aws-Ec2-Metadata-Token-Ttl-Seconds") == "" {
			http.Error(w, "missing ttl", http.StatusBadRequest)
			return
		}
		f.tokens++
		w.Header().Set("X-Aws-Ec2-Metadata-Token-Ttl-Seconds", "21600")
		io.WriteString(w, imdsToken)
	case r.Method == http.MethodGet:
		if r.Header.Get("X-Aws-Ec2-Metadata-Token") != imdsToken {
			f.rejected++
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		f.gets++
		switch r.URL.Path {
		case "/latest/meta-data/instance-id":
			io.WriteString(w, testInstanceID)
		case "/latest/dynamic/instance-identity/document":
			fmt.Fprintf(w, `{"instanceId":%q,"region":"eu-west-3","availabilityZone":"eu-west-3a"}`, testInstanceID)
		default:
			http.NotFound(w, r)
		}
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (f *fakeIMDS) counts() (tokens, gets, rejected int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tokens, f.gets, f.rejected
}

// staticAWS is an SDK configuration with static test credentials, so the
// tests never read the machine's AWS configuration.
func staticAWS(region string) aws.Config {
	return aws.Config{
		Region:      region,
		Credentials: credentials.NewStaticCredentialsProvider(testKeyID, testSecret, ""),
	}
}

func testAWSConfig(endpoint string) AWSConfig {
	return AWSConfig{GroupName: testGroup, Endpoint: endpoint, MaxAttempts: 3, MaxBackoff: 5 * time.Millisecond}
}

// observed returns a logger recording every entry, and a check that no
// entry mentions the secret key.
func observed(t *testing.T) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zap.DebugLevel)
	t.Cleanup(func() {
		for _, e := range logs.All() {
			line := e.Message
			for k, v := range e.ContextMap() {
				line += fmt.Sprintf(" %s=%v", k, v)
			}
			if strings.Contains(line, testSecret) {
				t.Errorf("log entry leaks the secret key: %s", line)
			}
		}
	})
	return zap.New(core), logs
}

func TestAWSDriverSetDesiredCapacity(t *testing.T) {
	asg := newFakeASG(t)
	log, logs := observed(t)
	d, err := NewAWSWithConfig(staticAWS("us-east-2"), testAWSConfig(asg.srv.URL), log)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name() != DriverAWS {
		t.Fatalf("Name() = %q", d.Name())
	}
	for _, n := range []int{7, 0} {
		if err := d.SetDesired(t.Context(), n); err != nil {
			t.Fatalf("SetDesired(%d): %v", n, err)
		}
	}
	calls := asg.Calls()
	if len(calls) != 2 {
		t.Fatalf("%d calls, want 2", len(calls))
	}
	for i, want := range []string{"7", "0"} {
		c := calls[i]
		for k, v := range map[string]string{
			"Action": "SetDesiredCapacity", "Version": "2011-01-01",
			"AutoScalingGroupName": testGroup, "DesiredCapacity": want, "HonorCooldown": "false",
		} {
			if got := c.get(k); got != v {
				t.Errorf("call %d: %s = %q, want %q (form %v)", i, k, got, v, c.form)
			}
		}
		if len(c.form) != 5 {
			t.Errorf("call %d sent unexpected parameters: %v", i, c.form)
		}
		// Signed with the configured credentials for the configured region.
		if !strings.Contains(c.auth, "Credential="+testKeyID+"/") || !strings.Contains(c.auth, "/us-east-2/autoscaling/aws4_request") {
			t.Errorf("call %d Authorization = %q", i, c.auth)
		}
	}
	if n := logs.FilterMessage("desired capacity set").Len(); n != 2 {
		t.Errorf("%d 'desired capacity set' log entries, want 2", n)
	}
	if err := d.SetDesired(t.Context(), -1); err == nil || len(asg.Calls()) != 2 {
		t.Errorf("SetDesired(-1) = %v after %d calls; want an error and no call", err, len(asg.Calls()))
	}
}

func TestAWSDriverErrors(t *testing.T) {
	throttle := asgReply{400, "Throttling", "Rate exceeded"}
	tests := []struct {
		name    string
		replies []asgReply
		calls   int      // requests the SDK makes (3 attempts at most)
		want    []string // substrings of the error; none means success
	}{
		{"throttled then succeeds", []asgReply{throttle, throttle}, 3, nil},
		{"throttled past the attempt limit", []asgReply{throttle, throttle, throttle}, 3,
			[]string{"SetDesiredCapacity", testGroup, "Throttling", "Rate exceeded"}},
		{"server error retried", []asgReply{{500, "InternalFailure", "try again"}}, 2, nil},
		{"contention retried", []asgReply{{400, "ResourceContention", "busy"}}, 2, nil},
		// A ValidationError has the group described (2 requests): the count
		// is within its size here, so the error stands.
		{"invalid group reported, not retried", []asgReply{{400, "ValidationError", "AutoScalingGroup name not found - AutoScalingGroup '" + testGroup + "' not found"}}, 2,
			[]string{"ValidationError", "check the group name and region", "not found", `"` + testGroup + `"`}},
		{"access denied", []asgReply{{403, "AccessDenied", "User is not authorized to perform: autoscaling:SetDesiredCapacity"}}, 1,
			[]string{"AccessDenied", "lack this autoscaling permission"}},
		{"activity in progress", []asgReply{{400, "ScalingActivityInProgress", "Scaling activity is in progress"}}, 1,
			[]string{"ScalingActivityInProgress", "next reconcile retries"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			asg := newFakeASG(t, tc.replies...)
			log, _ := observed(t)
			d, err := NewAWSWithConfig(staticAWS("us-east-1"), testAWSConfig(asg.srv.URL), log)
			if err != nil {
				t.Fatal(err)
			}
			err = d.SetDesired(t.Context(), 12)
			calls := asg.Calls()
			if len(calls) != tc.calls {
				t.Errorf("%d requests, want %d", len(calls), tc.calls)
			}
			for i, c := range calls {
				if c.get("Action") == "DescribeAutoScalingGroups" && i == len(calls)-1 {
					continue
				}
				if c.get("Action") != "SetDesiredCapacity" || c.get("DesiredCapacity") != "12" || c.get("AutoScalingGroupName") != testGroup {
					t.Errorf("request %d: %v", i, c.form)
				}
			}
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("SetDesired: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("SetDesired succeeded, want an error")
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			var apiErr smithy.APIError
			if !errors.As(err, &apiErr) || apiErr.ErrorCode() != tc.replies[len(tc.replies)-1].code {
				t.Errorf("error does not wrap the AWS API error: %v", err)
			}
		})
	}
}

// TestAWSDriverDefaultChain builds the driver the production way: only the
// SDK's default credential chain, here fed by the environment.
func TestAWSDriverDefaultChain(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_ACCESS_KEY_ID", testKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testSecret)
	t.Setenv("AWS_REGION", "ap-south-1")

	asg := newFakeASG(t)
	log, _ := observed(t)
	drv, err := NewDriver(t.Context(), DriverConfig{Kind: DriverAWS, AWS: testAWSConfig(asg.srv.URL)}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.SetDesired(t.Context(), 3); err != nil {
		t.Fatal(err)
	}
	calls := asg.Calls()
	if len(calls) != 1 || calls[0].get("DesiredCapacity") != "3" {
		t.Fatalf("calls = %v", calls)
	}
	if a := calls[0].auth; !strings.Contains(a, "Credential="+testKeyID+"/") || !strings.Contains(a, "/ap-south-1/autoscaling/") {
		t.Errorf("Authorization = %q, want the environment's key and region", a)
	}

	// An explicit region wins over the environment's.
	cfg := testAWSConfig(asg.srv.URL)
	cfg.Region = "sa-east-1"
	drv, err = NewAWS(t.Context(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.SetDesired(t.Context(), 4); err != nil {
		t.Fatal(err)
	}
	if a := asg.Calls()[1].auth; !strings.Contains(a, "/sa-east-1/autoscaling/") {
		t.Errorf("Authorization = %q, want region sa-east-1", a)
	}

	if _, err := NewAWS(t.Context(), AWSConfig{}, log); err == nil || !strings.Contains(err.Error(), "group name") {
		t.Errorf("NewAWS without a group: %v", err)
	}
	if _, err := NewAWSWithConfig(staticAWS(""), AWSConfig{GroupName: "g"}, log); err == nil || !strings.Contains(err.Error(), "no region") {
		t.Errorf("NewAWSWithConfig without a region: %v", err)
	}
}

// TestReconcilerSurvivesAWSErrors runs the producer's actor against the real
// SDK and a failing group: errors are reported in Status and the log, the
// loop computes nothing until it could read the group's count and keeps its
// desired count while AWS refuses it, and the next tick applies it once AWS
// accepts.
func TestReconcilerSurvivesAWSErrors(t *testing.T) {
	asg := newFakeASG(t,
		asgReply{400, "ValidationError", "AutoScalingGroup name not found - AutoScalingGroup 'farm-consumers' not found"},
		asgReply{}, asgReply{400, "Throttling", "Rate exceeded"}, asgReply{400, "Throttling", "Rate exceeded"}, asgReply{400, "Throttling", "Rate exceeded"},
	)
	log, logs := observed(t)
	d, err := NewAWSWithConfig(staticAWS("us-east-1"), testAWSConfig(asg.srv.URL), log)
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: t0}
	r, err := NewReconciler(ReconcilerConfig{Now: clock.Now}, SourceFunc(func(context.Context) (Load, error) {
		return Load{Pending: 20}, nil
	}), d, log)
	if err != nil {
		t.Fatal(err)
	}

	// Tick 1: the group's count cannot be read (invalid group). Tick 2: it
	// can (0), and setting 5 is throttled on every attempt.
	// (Until a count is computed, Desired says it is unknown: -1.)
	for i, want := range []struct {
		err            string
		desired, shown int
	}{{"ValidationError", 0, -1}, {"Throttling", 5, 5}} {
		dec, err := r.Tick(t.Context())
		if err == nil || !strings.Contains(err.Error(), want.err) {
			t.Fatalf("tick %d: err = %v, want %s", i+1, err, want.err)
		}
		st := r.Status()
		if dec.Desired != want.desired || r.Desired() != want.shown || st.Applied != -1 || !strings.Contains(st.LastError, want.err) || st.Errors != i+1 {
			t.Fatalf("tick %d: decision %+v status %+v", i+1, dec, st)
		}
		clock.Advance(15 * time.Second)
	}
	if _, err := r.Tick(t.Context()); err != nil {
		t.Fatalf("tick 3: %v", err)
	}
	st := r.Status()
	if st.Applied != 5 || st.LastError != "" {
		t.Fatalf("after recovery: %+v", st)
	}
	var actions []string
	for _, c := range asg.Calls() {
		actions = append(actions, c.get("Action")+" "+c.get("DesiredCapacity"))
	}
	want := []string{"DescribeAutoScalingGroups ", "DescribeAutoScalingGroups ",
		"SetDesiredCapacity 5", "SetDesiredCapacity 5", "SetDesiredCapacity 5", "SetDesiredCapacity 5"}
	if !slices.Equal(actions, want) {
		t.Fatalf("requests %q, want %q (a read refused, a read, 3 throttled, 1 ok)", actions, want)
	}
	if n := logs.FilterMessage("driver could not apply desired count; retrying next tick").Len(); n != 1 {
		t.Errorf("%d driver failure log entries, want 1", n)
	}
	if n := logs.FilterMessage("cannot read the orchestrator's count; computing nothing until it can be read").Len(); n != 1 {
		t.Errorf("%d read failure log entries, want 1", n)
	}
}

// TestAWSDriverKeepsToTheGroupsSize: a count outside the group's MinSize
// and MaxSize, which AWS refuses, is set to the nearest bound instead of
// leaving the group where it was; the error of a count within them stands.
func TestAWSDriverKeepsToTheGroupsSize(t *testing.T) {
	asg := newFakeASG(t)
	asg.desired, asg.minSize, asg.maxSize = 3, 1, 8
	log, logs := observed(t)
	d, err := NewAWSWithConfig(staticAWS("us-east-2"), testAWSConfig(asg.srv.URL), log)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ask, want int }{{10, 8}, {0, 1}, {5, 5}} {
		if err := d.SetDesired(t.Context(), tc.ask); err != nil {
			t.Fatalf("SetDesired(%d): %v", tc.ask, err)
		}
		if n, err := d.Current(t.Context()); n != tc.want || err != nil {
			t.Errorf("after SetDesired(%d) the group wants %d (%v), want %d", tc.ask, n, err, tc.want)
		}
	}
	if n := logs.FilterMessageSnippet("outside the group's size").Len(); n != 2 {
		t.Errorf("%d warnings of a count outside the group's size, want 2", n)
	}
	// The refusal the bound answers is expected: no error an alert would
	// fire on at every reapply (QA).
	if n := logs.FilterLevelExact(zap.ErrorLevel).Len(); n != 0 {
		t.Errorf("%d error lines, want none: %v", n, logs.FilterLevelExact(zap.ErrorLevel).All())
	}
}

// TestAWSDriverCurrent reads the group's desired capacity back, and names
// the group and region when it does not exist.
func TestAWSDriverCurrent(t *testing.T) {
	asg := newFakeASG(t)
	asg.desired = 8
	d, err := NewAWSWithConfig(staticAWS("us-east-2"), testAWSConfig(asg.srv.URL), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := d.Current(t.Context()); n != 8 || err != nil {
		t.Fatalf("Current() = %d, %v; want 8", n, err)
	}
	c := asg.Calls()[0]
	if c.get("Action") != "DescribeAutoScalingGroups" || c.get("AutoScalingGroupNames.member.1") != testGroup {
		t.Errorf("request %v", c.form)
	}
	asg.mu.Lock()
	asg.noGroup = true
	asg.mu.Unlock()
	if _, err := d.Current(t.Context()); err == nil || !strings.Contains(err.Error(), testGroup) || !strings.Contains(err.Error(), "us-east-2") {
		t.Fatalf("Current() of a missing group: %v, want an error naming the group and region", err)
	}
}

func TestMain(m *testing.M) {
	// Keep the machine's AWS configuration out of every test in the
	// package; tests that need the default chain set their own.
	for _, k := range []string{"AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_EC2_METADATA_SERVICE_ENDPOINT"} {
		os.Unsetenv(k)
	}
	goleak.VerifyTestMain(m)
}
