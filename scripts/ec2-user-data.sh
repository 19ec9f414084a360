#!/bin/bash
# EC2 user-data for a browserfarm consumer (Debian 12 AMI) in an Auto Scaling group.
#
# User-data gets no variables from the launch template: edit the values below
# before pasting this script into it. FARM_ASG_NAME may stay empty when the
# launch template enables instance metadata tags (the group's
# aws:autoscaling:groupName tag is then read from IMDS). The instance role
# needs autoscaling:SetInstanceProtection on the group.
#
# The node id is the instance id, so a replaced instance never collides with
# an old one, and the consumer keeps scale-in protection on while it has work
# (--aws-instance-protection), so the group only terminates idle instances.
set -euo pipefail # no -x: the database URL holds a password

FARM_DATABASE_URL="postgres://farm:CHANGE-ME@db.internal:5432/farm"  # the producer's PostgreSQL
FARM_BINARY_URL=""   # where your build of `farm` is published (e.g. an S3 presigned URL); empty if baked into the AMI
FARM_ASG_NAME=""     # the consumers' Auto Scaling group; empty: from the instance's tags
FARM_WAKE_URL=""     # the producer's API (http://producer.internal:8080): wake-ups by long-poll instead of LISTEN, for large fleets; empty: LISTEN
FARM_WAKE_TOKEN=""   # the producer's --read-token, when FARM_WAKE_URL is set

case "$FARM_DATABASE_URL" in *CHANGE-ME*) echo "user-data: set FARM_DATABASE_URL first" >&2; exit 1 ;; esac

export DEBIAN_FRONTEND=noninteractive
apt-get update
# chromium-headless-shell is the consumers' browser (the farm's default: about
# half the CPU per page of full Chrome); chromium stays installed for
# FARM_BROWSER=chrome, for sites that tell the shell apart. The fonts are the
# image's (TestDeploymentsInstallTheSameFonts): a page renders, and its
# screenshot looks, the same on either path.
apt-get install -y --no-install-recommends chromium-headless-shell chromium fonts-liberation fonts-noto-color-emoji fonts-noto-cjk ca-certificates curl

if [ -n "$FARM_BINARY_URL" ]; then
  curl -fsSL "$FARM_BINARY_URL" -o /usr/local/bin/farm
fi
test -x /usr/local/bin/farm
# Executable but not readable by the farm user, so every farm process is
# non-dumpable from its exec on (README: What Chrome can read of the farm).
chown root:root /usr/local/bin/farm
chmod 0711 /usr/local/bin/farm

id farm >/dev/null 2>&1 || useradd --system --create-home --home-dir /var/lib/farm farm

# IMDSv2: a session token, then the instance id (and the group from the tags).
token=$(curl -fsS -X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 300')
imds() { curl -fsS -H "X-aws-ec2-metadata-token: $token" "http://169.254.169.254/latest/meta-data/$1"; }
instance_id=$(imds instance-id)
if [ -z "$FARM_ASG_NAME" ]; then
  FARM_ASG_NAME=$(imds tags/instance/aws:autoscaling:groupName || true)
fi
protection=true
if [ -z "$FARM_ASG_NAME" ]; then
  echo "user-data: no Auto Scaling group name (set FARM_ASG_NAME or enable instance metadata tags); running without scale-in protection" >&2
  protection=false
fi

install -d -m 0750 -o root -g farm /etc/browserfarm
cat > /etc/browserfarm/consumer.env <<ENV
FARM_DATABASE_URL=${FARM_DATABASE_URL}
FARM_NODE_ID=${instance_id}
FARM_BROWSER=shell
FARM_AWS_INSTANCE_PROTECTION=${protection}
FARM_AWS_ASG_NAME=${FARM_ASG_NAME}
FARM_LOG_FORMAT=json
ENV
if [ -n "$FARM_WAKE_URL" ]; then
  printf 'FARM_WAKE_URL=%s\nFARM_WAKE_TOKEN=%s\n' "$FARM_WAKE_URL" "$FARM_WAKE_TOKEN" >> /etc/browserfarm/consumer.env
fi
chmod 0640 /etc/browserfarm/consumer.env

cat > /etc/systemd/system/farm-consumer.service <<'UNIT'
[Unit]
Description=browserfarm consumer node (headless Chrome scraping)
Documentation=https://github.com/browserfarm/browserfarm
Wants=network-online.target
After=network-online.target
# Never give up restarting a node that keeps failing (the database away).
StartLimitIntervalSec=0

[Service]
Type=simple
User=farm
Group=farm
EnvironmentFile=/etc/browserfarm/consumer.env
Environment=FARM_RESPAWN=true
ExecStart=/usr/local/bin/farm consumer
Restart=on-failure
RestartSec=2
SuccessExitStatus=75
RestartPreventExitStatus=64
# SIGTERM drains: in-flight jobs finish (bounded by --drain-timeout), unstarted ones are handed back.
KillSignal=SIGTERM
TimeoutStopSec=120
# SIGTERM goes to the consumer alone, which drains (its Chrome keeps rendering
# the in-flight jobs) and kills its Chrome itself; whatever is still in the
# unit's cgroup after TimeoutStopSec gets SIGKILL.
KillMode=mixed
PrivateTmp=true
NoNewPrivileges=true
ProtectSystem=strict
ProtectHome=true
ReadWritePaths=/tmp
# /var/lib/browserfarm, writable under ProtectSystem=strict: a file blob
# store (--blob-store file:///var/lib/browserfarm/blobs) goes there.
StateDirectory=browserfarm
MemoryMax=8G
TasksMax=4096
LimitNOFILE=65536
# A replacement Chrome boots at nice 10 while the old one serves, and gets
# its priority back when it takes over; raising a priority needs this limit
# (raw 20: down to nice 0, never below).
LimitNICE=20

[Install]
WantedBy=multi-user.target
UNIT

systemctl daemon-reload
systemctl enable --now farm-consumer
