#!/usr/bin/env bash
# The image's side of the Kubeflow MPI Operator v2 contract (bench k8s, docs/kubernetes.md): worker pods run
# sshd as the non-root user mpiuser (uid 1000) from a user-level config, with the job's keys where the operator
# mounts them (sshAuthMountPath /home/mpiuser/.ssh: id_rsa, id_rsa.pub, authorized_keys, read-only, root's),
# and the launcher's mpirun reaches them over SSH on that sshd's port.
#
#   mpijob-ssh.sh install       SSH, the user and both configurations (before this package: cached)
#   mpijob-ssh.sh environment   after the image's last ENV: commands started over SSH get the image's PATH and
#                               settings (an SSH session gets only what sshd sets; mpirun forwards the rest, -x)
set -euo pipefail
PORT=2222
HOME_DIR=/home/mpiuser

case ${1:?usage: mpijob-ssh.sh install|environment} in
  install)
    apt-get update
    apt-get install -y --no-install-recommends openssh-server openssh-client
    rm -rf /var/lib/apt/lists/*
    useradd --create-home --uid 1000 --user-group --shell /bin/bash mpiuser
    # The client, for every host: the non-root sshd's port; no known_hosts (the key directory is read-only,
    # and every pod of a job is new).
    printf 'Host *\n  Port %s\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n' \
      "$PORT" > /etc/ssh/ssh_config.d/hvdbench-mpijob.conf
    # The server, as mpiuser: the job's private key is its host key too; StrictModes off, because the Secret's
    # files are root's and world-readable.
    cat > "$HOME_DIR/.sshd_config" <<CONFIG
Port $PORT
PidFile $HOME_DIR/sshd.pid
HostKey $HOME_DIR/.ssh/id_rsa
AuthorizedKeysFile $HOME_DIR/.ssh/authorized_keys
StrictModes no
PermitRootLogin no
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
CONFIG
    chown mpiuser:mpiuser "$HOME_DIR/.sshd_config"
    mkdir -p /run/sshd
    ;;
  environment)
    settings=()
    for name in PATH VIRTUAL_ENV LD_LIBRARY_PATH PYTHONUNBUFFERED TF_USE_LEGACY_KERAS \
                $(compgen -e | grep -E '^HVDBENCH_(IMAGE|PYTHON)_' || true); do
      [[ -n ${!name:-} ]] && settings+=("\"$name=${!name}\"")
    done
    sed -i '/^SetEnv /d' "$HOME_DIR/.sshd_config"
    echo "SetEnv ${settings[*]}" >> "$HOME_DIR/.sshd_config"
    ;;
  *) echo "usage: mpijob-ssh.sh install|environment" >&2; exit 2 ;;
esac
