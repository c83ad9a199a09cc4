/*
 * The servers of the remote-tier tests, on loopback, started and stopped by the test itself: a
 * real nginx with WebDAV PUT (tests/remote/nginx_dav.sh) and a misbehaving HTTP server
 * (tests/remote/fault_server.py, whose first path segment picks the fault).
 */
#ifndef KVJIT_TEST_REMOTE_SERVERS_H
#define KVJIT_TEST_REMOTE_SERVERS_H

typedef struct remote_servers {
  char dir[256];        /* a temp dir holding both servers' files */
  char nginx_url[512];  /* http://127.0.0.1:PORT/kvjit */
  char fault_base[128]; /* http://127.0.0.1:PORT (append "/MODE") */
  int fault_pid;
} remote_servers;

/** 1 when python3 and nginx are there (else the caller skips: exit 77). */
int remote_servers_available(void);

/** Start both; 0 on success. */
int remote_servers_start(remote_servers *s, const char *fault_script, const char *nginx_script, const char *name);

/** Stop both and remove their dir. */
void remote_servers_stop(remote_servers *s, const char *nginx_script);

#endif
