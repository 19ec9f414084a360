package autoscale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"go.uber.org/zap"

	"github.com/browserfarm/browserfarm/internal/cfgrule"
)

// Defaults for AWSConfig.
const (
	DefaultAWSMaxAttempts = 5
	DefaultAWSMaxBackoff  = 20 * time.Second
)

// AWSConfig configures the EC2 Auto Scaling group driver and the
// consumer's InstanceProtector. Credentials are never part of it: they come
// only from the SDK's default chain (environment, shared config and
// credentials files, SSO, web identity, the instance role) and are never
// logged.
//
// Zero fields take their defaults; none can be off, and a negative one is
// an error naming it.
type AWSConfig struct {
	// GroupName is the Auto Scaling group of the consumer fleet (required).
	GroupName string
	// Region of the group; empty means the default chain (AWS_REGION, the
	// profile) and, for the InstanceProtector, then the instance metadata.
	Region string
	// Endpoint overrides the Auto Scaling API endpoint (a VPC endpoint, or a
	// local fake in tests); empty means the SDK's regional endpoint.
	Endpoint string
	// MaxAttempts is the SDK retryer's attempt limit per call (default 5);
	// throttling and transient errors are retried with jittered backoff.
	MaxAttempts int
	// MaxBackoff caps the retryer's delay between attempts (default 20s,
	// the SDK's own).
	MaxBackoff time.Duration
}

// withDefaults fills the zero fields; neither can be off, and a negative
// one is an error naming it.
func (c AWSConfig) withDefaults() (AWSConfig, error) {
	return c, errors.Join(
		cfgrule.Resolve("MaxAttempts", &c.MaxAttempts, DefaultAWSMaxAttempts, false),
		cfgrule.Resolve("MaxBackoff", &c.MaxBackoff, DefaultAWSMaxBackoff, false))
}

// loadAWSConfig resolves the SDK configuration from the default chain.
func loadAWSConfig(ctx context.Context, cfg AWSConfig) (aws.Config, error) {
	var opts []func(*config.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		// The SDK's message may quote a profile or file name, never a secret.
		return aws.Config{}, fmt.Errorf("autoscale: aws: load SDK configuration: %w", err)
	}
	return awsCfg, nil
}

// newASGClient builds the Auto Scaling client with the project's retry
// policy on top of whatever the SDK configuration says.
func newASGClient(awsCfg aws.Config, cfg AWSConfig) *autoscaling.Client {
	return autoscaling.NewFromConfig(awsCfg, func(o *autoscaling.Options) {
		if cfg.Region != "" {
			o.Region = cfg.Region
		}
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = cfg.MaxAttempts
			so.MaxBackoff = cfg.MaxBackoff
			// The group is busy with another activity: worth another try
			// shortly, like a throttle.
			so.Retryables = append(so.Retryables, retry.RetryableErrorCode{
				Codes: map[string]struct{}{"ResourceContention": {}},
			})
		})
	})
}

// AWSDriver sets the desired capacity of an EC2 Auto Scaling group.
type AWSDriver struct {
	client *autoscaling.Client
	group  string
	region string
	log    *zap.Logger
}

// NewAWS loads the SDK configuration from the default chain and returns the
// driver. It makes no network call: a wrong group or missing permission
// shows up, clearly worded, on the first SetDesired.
func NewAWS(ctx context.Context, cfg AWSConfig, log *zap.Logger) (*AWSDriver, error) {
	if cfg.GroupName == "" {
		return nil, errors.New("autoscale: aws driver needs an Auto Scaling group name")
	}
	awsCfg, err := loadAWSConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return NewAWSWithConfig(awsCfg, cfg, log)
}

// NewAWSWithConfig is NewAWS with an SDK configuration the caller already
// resolved (tests use static credentials this way).
func NewAWSWithConfig(awsCfg aws.Config, cfg AWSConfig, log *zap.Logger) (*AWSDriver, error) {
	if cfg.GroupName == "" {
		return nil, errors.New("autoscale: aws driver needs an Auto Scaling group name")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("autoscale: aws driver: %w", err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	region := cfg.Region
	if region == "" {
		region = awsCfg.Region
	}
	if region == "" {
		return nil, errors.New("autoscale: aws driver: no region (set the region flag, AWS_REGION or a profile region)")
	}
	return &AWSDriver{
		client: newASGClient(awsCfg, cfg),
		group:  cfg.GroupName,
		region: region,
		log:    log.Named("autoscale.aws").With(zap.String("group", cfg.GroupName), zap.String("region", region)),
	}, nil
}

// Name returns "aws".
func (*AWSDriver) Name() string { return DriverAWS }

// SetDesired calls SetDesiredCapacity with HonorCooldown false: the
// producer's own policy already applied its cooldown, and the group's must
// not delay a scale-out. Throttling is retried by the SDK; what is left is
// returned with the AWS error code and a hint.
func (d *AWSDriver) SetDesired(ctx context.Context, n int) error {
	if n < 0 || n > math.MaxInt32 {
		return fmt.Errorf("autoscale: aws: desired count %d out of range", n)
	}
	err := d.set(ctx, n)
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "ValidationError" {
		d.logFailed(n, err)
		return err
	}
	// The group refuses a count outside its MinSize..MaxSize. Refused, the
	// count would stay where it was, and the same count be refused at
	// every reapply: a burst would wait at 3 nodes for a group whose
	// maximum is 8, an idle night keep 7 for a group whose minimum is 1.
	// The nearest bound is what the group can do.
	g, derr := d.describe(ctx)
	if derr != nil || g.MinSize == nil || g.MaxSize == nil {
		d.logFailed(n, err)
		return err
	}
	lo, hi := int(*g.MinSize), int(*g.MaxSize)
	if n >= lo && n <= hi {
		d.logFailed(n, err)
		return err
	}
	// The refusal is expected, and the bound is set instead: a warning,
	// not an error an alert would fire on at every reapply.
	bound := min(max(n, lo), hi)
	d.log.Warn("desired count outside the group's size; set to its nearest bound (make the group's MinSize and MaxSize cover the producer's --autoscale-min and --autoscale-max); the producer's desired_nodes still says the count it wanted",
		zap.Int("desired", n), zap.Int("set", bound), zap.Int("group_min_size", lo), zap.Int("group_max_size", hi))
	err = d.set(ctx, bound)
	d.logFailed(bound, err)
	return err
}

// logFailed logs a SetDesiredCapacity that failed (err nil: nothing).
func (d *AWSDriver) logFailed(n int, err error) {
	if err != nil {
		d.log.Error("set desired capacity failed", zap.Int("desired", n), zap.Error(err))
	}
}

// set calls SetDesiredCapacity once (with the SDK's retries).
func (d *AWSDriver) set(ctx context.Context, n int) error {
	start := time.Now()
	out, err := d.client.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{
		AutoScalingGroupName: aws.String(d.group),
		DesiredCapacity:      aws.Int32(int32(n)),
		HonorCooldown:        aws.Bool(false),
	})
	if err != nil {
		return explainAWSError(err, fmt.Sprintf("SetDesiredCapacity(group %q, %d)", d.group, n))
	}
	d.log.Info("desired capacity set", zap.Int("desired", n),
		zap.Int("attempts", attempts(out.ResultMetadata)), zap.Duration("took", time.Since(start)))
	return nil
}

// Current returns the group's desired capacity
// (DescribeAutoScalingGroups).
func (d *AWSDriver) Current(ctx context.Context) (int, error) {
	g, err := d.describe(ctx)
	if err != nil {
		return 0, err
	}
	if g.DesiredCapacity == nil {
		return 0, fmt.Errorf("autoscale: aws: DescribeAutoScalingGroups: group %q has no desired capacity", d.group)
	}
	return int(*g.DesiredCapacity), nil
}

// describe returns the group (DescribeAutoScalingGroups).
func (d *AWSDriver) describe(ctx context.Context) (types.AutoScalingGroup, error) {
	out, err := d.client.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{
		AutoScalingGroupNames: []string{d.group},
	})
	if err != nil {
		return types.AutoScalingGroup{}, explainAWSError(err, fmt.Sprintf("DescribeAutoScalingGroups(group %q)", d.group))
	}
	for _, g := range out.AutoScalingGroups {
		if aws.ToString(g.AutoScalingGroupName) == d.group {
			return g, nil
		}
	}
	return types.AutoScalingGroup{}, fmt.Errorf("autoscale: aws: DescribeAutoScalingGroups: no group %q in region %s (check the group name and region)", d.group, d.region)
}

// attempts reads how many tries the SDK retryer made.
func attempts(md middleware.Metadata) int {
	if r, ok := retry.GetAttemptResults(md); ok {
		return len(r.Results)
	}
	return 0
}

// explainAWSError wraps err with its AWS error code and a hint for the
// errors an operator can fix.
func explainAWSError(err error, call string) error {
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) {
		return fmt.Errorf("autoscale: aws: %s: %w", call, err)
	}
	hint := ""
	switch code := apiErr.ErrorCode(); {
	case code == "ValidationError":
		hint = " (check the group name and region, and that the count is within the group's min and max size)"
	case strings.Contains(code, "AccessDenied") || code == "UnauthorizedOperation":
		hint = " (the credentials from the SDK's default chain lack this autoscaling permission)"
	case code == "InvalidClientTokenId" || code == "SignatureDoesNotMatch" || code == "ExpiredToken":
		hint = " (the credentials from the SDK's default chain are not valid)"
	case code == "ScalingActivityInProgress" || code == "ResourceContention":
		hint = " (the group is busy; the next reconcile retries)"
	}
	return fmt.Errorf("autoscale: aws: %s failed with %s%s: %w", call, apiErr.ErrorCode(), hint, err)
}

// InstanceProtector keeps EC2 Auto Scaling scale-in protection on this
// consumer's instance while it has work and off when it is idle, so that a
// lower desired count only ever terminates idle instances. It learns the
// instance id (and, if needed, the region) from IMDSv2 on first use and
// calls SetInstanceProtection only when the wanted state changes. Errors are
// returned and logged, never fatal: the worst case is an unprotected busy
// instance, whose jobs go back to the queue when it is terminated.
type InstanceProtector struct {
	asg   *autoscaling.Client
	imds  *imds.Client
	group string
	log   *zap.Logger

	// mu serialises calls so protection changes reach AWS in order.
	mu         sync.Mutex
	instanceID string
	region     string
	applied    bool // whether protected reflects AWS's state
	protected  bool
}

// ProtectorConfig configures an InstanceProtector.
type ProtectorConfig struct {
	AWSConfig
	// IMDSEndpoint overrides the instance metadata endpoint; empty means
	// the SDK default (AWS_EC2_METADATA_SERVICE_ENDPOINT or 169.254.169.254).
	IMDSEndpoint string
	// InstanceID skips the metadata lookup when set.
	InstanceID string
}

// NewInstanceProtector loads the SDK configuration from the default chain
// and returns a protector. It makes no network call.
func NewInstanceProtector(ctx context.Context, cfg ProtectorConfig, log *zap.Logger) (*InstanceProtector, error) {
	if cfg.GroupName == "" {
		return nil, errors.New("autoscale: instance protection needs an Auto Scaling group name")
	}
	awsCfg, err := loadAWSConfig(ctx, cfg.AWSConfig)
	if err != nil {
		return nil, err
	}
	return NewInstanceProtectorWithConfig(awsCfg, cfg, log)
}

// NewInstanceProtectorWithConfig is NewInstanceProtector with an SDK
// configuration the caller already resolved.
func NewInstanceProtectorWithConfig(awsCfg aws.Config, cfg ProtectorConfig, log *zap.Logger) (*InstanceProtector, error) {
	if cfg.GroupName == "" {
		return nil, errors.New("autoscale: instance protection needs an Auto Scaling group name")
	}
	var err error
	if cfg.AWSConfig, err = cfg.AWSConfig.withDefaults(); err != nil {
		return nil, fmt.Errorf("autoscale: instance protection: %w", err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	region := cfg.Region
	if region == "" {
		region = awsCfg.Region
	}
	return &InstanceProtector{
		asg: newASGClient(awsCfg, cfg.AWSConfig),
		imds: imds.NewFromConfig(awsCfg, func(o *imds.Options) {
			if cfg.IMDSEndpoint != "" {
				o.Endpoint = cfg.IMDSEndpoint
			}
			// IMDSv2 only: never fall back to the unauthenticated v1 flow.
			o.EnableFallback = aws.FalseTernary
		}),
		group:      cfg.GroupName,
		log:        log.Named("autoscale.protect").With(zap.String("group", cfg.GroupName)),
		instanceID: cfg.InstanceID,
		region:     region,
	}, nil
}

// InstanceID returns this instance's id, asking IMDSv2 once.
func (p *InstanceProtector) InstanceID(ctx context.Context) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.resolve(ctx); err != nil {
		return "", err
	}
	return p.instanceID, nil
}

// resolve fills the instance id and region from the metadata service.
// Callers hold p.mu.
func (p *InstanceProtector) resolve(ctx context.Context) error {
	if p.instanceID == "" {
		out, err := p.imds.GetMetadata(ctx, &imds.GetMetadataInput{Path: "instance-id"})
		if err != nil {
			return fmt.Errorf("autoscale: read instance id from IMDSv2: %w", err)
		}
		b, err := io.ReadAll(io.LimitReader(out.Content, 256))
		out.Content.Close()
		if err != nil {
			return fmt.Errorf("autoscale: read instance id from IMDSv2: %w", err)
		}
		id := strings.TrimSpace(string(b))
		if id == "" {
			return errors.New("autoscale: IMDSv2 returned an empty instance id")
		}
		p.instanceID = id
		p.log = p.log.With(zap.String("instance_id", id))
	}
	if p.region == "" {
		out, err := p.imds.GetRegion(ctx, &imds.GetRegionInput{})
		if err != nil {
			return fmt.Errorf("autoscale: read region from IMDSv2: %w", err)
		}
		p.region = out.Region
	}
	return nil
}

// SetBusy turns scale-in protection on (busy) or off (idle). It calls AWS
// only when the state differs from the last one applied; after a failure
// the next call tries again. It blocks for the API call and the SDK's
// retries, so callers bound it with ctx and keep it off the job path.
func (p *InstanceProtector) SetBusy(ctx context.Context, busy bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.applied && p.protected == busy {
		return nil
	}
	if err := p.resolve(ctx); err != nil {
		p.log.Warn("cannot set scale-in protection", zap.Bool("protect", busy), zap.Error(err))
		return err
	}
	region := p.region
	_, err := p.asg.SetInstanceProtection(ctx, &autoscaling.SetInstanceProtectionInput{
		AutoScalingGroupName: aws.String(p.group),
		InstanceIds:          []string{p.instanceID},
		ProtectedFromScaleIn: aws.Bool(busy),
	}, func(o *autoscaling.Options) { o.Region = region })
	if err != nil {
		p.applied = false
		err = explainAWSError(err, fmt.Sprintf("SetInstanceProtection(group %q, instance %s, %t)", p.group, p.instanceID, busy))
		p.log.Warn("cannot set scale-in protection", zap.Bool("protect", busy), zap.Error(err))
		return err
	}
	p.applied, p.protected = true, busy
	p.log.Info("scale-in protection set", zap.Bool("protect", busy))
	return nil
}

// Protected reports the last protection state applied, and whether any was.
func (p *InstanceProtector) Protected() (protected, known bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.protected, p.applied
}
