#!/usr/bin/env bash
# Start a real nginx with WebDAV PUT on a free loopback port, as the remote cache tier's server.
# usage: nginx_dav.sh start DIR   -> prints the base URL (http://127.0.0.1:PORT/kvjit); data in DIR/data
#        nginx_dav.sh stop DIR
# Everything (config, pid, logs, data) lives under DIR; nothing system-wide is touched.
set -euo pipefail
cmd=${1:?start|stop} dir=${2:?dir}
nginx=${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}
case $cmd in
start)
  [[ -x $nginx ]] || { echo "nginx_dav.sh: no nginx ($nginx)" >&2; exit 77; }
  mkdir -p "$dir/data/kvjit" "$dir/tmp" "$dir/logs"
  for try in 1 2 3 4 5; do
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    user=""
    [[ $(id -u) -eq 0 ]] && user="user root root;" # workers would drop to nobody and lose DIR
    cat >"$dir/nginx.conf" <<CONF
$user
daemon on;
pid $dir/nginx.pid;
error_log $dir/logs/error.log warn;
worker_processes 1;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path $dir/tmp;
  proxy_temp_path $dir/tmp; fastcgi_temp_path $dir/tmp; uwsgi_temp_path $dir/tmp; scgi_temp_path $dir/tmp;
  server {
    listen 127.0.0.1:$port;
    location /kvjit/ {
      root $dir/data;
      dav_methods PUT DELETE;
      create_full_put_path on;
      dav_access user:rw;
      client_max_body_size 300m;
    }
  }
}
CONF
    if "$nginx" -c "$dir/nginx.conf" -p "$dir" 2>"$dir/logs/start.log"; then
      for _ in $(seq 50); do [[ -s $dir/nginx.pid ]] && break; sleep 0.05; done
      echo "http://127.0.0.1:$port/kvjit"
      exit 0
    fi
  done
  cat "$dir/logs/start.log" >&2
  exit 1
  ;;
stop)
  if [[ -s $dir/nginx.pid ]]; then
    pid=$(cat "$dir/nginx.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  fi
  ;;
esac
