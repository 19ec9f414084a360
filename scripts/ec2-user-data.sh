#!/bin/bash
# EC2 user-data for a browserfarm consumer (Debian 12 AMI) in an Auto Scaling group.
# Set FARM_DATABASE_URL (the producer's PostgreSQL) and FARM_BINARY_URL (where
# your build of `farm` is published, e.g. an S3 presigned URL) in the launch template,
# or bake the binary into the AMI and leave FARM_BINARY_URL empty.
#
# The node id is the instance id, so a replaced instance never collides with
# an old one, and the consumer keeps scale-in protection on while it has work
# (--aws-instance-protection), so the group only terminates idle instances.
set -euxo pipefail

FARM_DATABASE_URL="${FARM_DATABASE_URL:?set FARM_DATABASE_URL in the launch template}"
FARM_BINARY_URL="${FARM_BINARY_URL:-}"

export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends chromium fonts-liberation fonts-noto-color-emoji ca-certificates curl

if [ -n "$FARM_BINARY_URL" ]; then
  curl -fsSL "$FARM_BINARY_URL" -o /usr/local/bin/farm
  chmod 0755 /usr/local/bin/farm
fi
test -x /usr/local/bin/farm

id farm >/dev/null 2>&1 || useradd --system --create-home --home-dir /var/lib/farm farm

# IMDSv2: a session token, then the instance id.
token=$(curl -fsS -X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 300')
instance_id=$(curl -fsS -H "X-aws-ec2-metadata-token: $token" http://169.254.169.254/latest/meta-data/instance-id)

install -d -m 0750 -o root -g farm /etc/browserfarm
cat > /etc/browserfarm/consumer.env <<ENV
FARM_DATABASE_URL=${FARM_DATABASE_URL}
FARM_NODE_ID=${instance_id}
FARM_CHROME=/usr/lib/chromium/chromium
FARM_AWS_INSTANCE_PROTECTION=true
FARM_LOG_FORMAT=json
ENV
chmod 0640 /etc/browserfarm/consumer.env

cat > /etc/systemd/system/farm-consumer.service <<'UNIT'
[Unit]
Description=browserfarm consumer node
Wants=network-online.target
After=network-online.target
# Recycles (exit 75) can be frequent under load: never rate-limit restarts.
StartLimitIntervalSec=0

[Service]
User=farm
Group=farm
EnvironmentFile=/etc/browserfarm/consumer.env
ExecStart=/usr/local/bin/farm consumer
Restart=always
RestartSec=2
SuccessExitStatus=75
KillSignal=SIGTERM
TimeoutStopSec=120
KillMode=control-group
LimitNOFILE=65536

[Install]
WantedBy=multi-user.target
UNIT

systemctl daemon-reload
systemctl enable --now farm-consumer
