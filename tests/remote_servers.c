/* The remote-tier tests' servers (remote_servers.h). */
#include "remote_servers.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"

int remote_servers_available(void) {
  return system("command -v python3 >/dev/null && { command -v nginx || test -x /usr/sbin/nginx; } >/dev/null") == 0;
}

int remote_servers_start(remote_servers *s, const char *fault_script, const char *nginx_script, const char *name) {
  memset(s, 0, sizeof *s);
  s->fault_pid = -1;
  if (test_dir_make(s->dir, sizeof s->dir, name) != 0) return -1;
  char port_file[300];
  snprintf(port_file, sizeof port_file, "%s/port", s->dir);
  pid_t pid = fork();
  if (pid == 0) {
    execlp("python3", "python3", fault_script, port_file, (char *)NULL);
    _exit(127);
  }
  s->fault_pid = (int)pid;
  int port = 0;
  for (int i = 0; i < 250 && port == 0; i++) {
    FILE *f = fopen(port_file, "r");
    if (f) {
      if (fscanf(f, "%d", &port) != 1) port = 0;
      fclose(f);
    }
    if (port == 0) usleep(20000);
  }
  if (port == 0) return -1;
  snprintf(s->fault_base, sizeof s->fault_base, "http://127.0.0.1:%d", port);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "bash '%s' start '%s/nginx'", nginx_script, s->dir);
  FILE *p = popen(cmd, "r");
  if (p == NULL) return -1;
  if (fgets(s->nginx_url, sizeof s->nginx_url, p) == NULL) s->nginx_url[0] = '\0';
  s->nginx_url[strcspn(s->nginx_url, "\n")] = '\0';
  return pclose(p) == 0 && s->nginx_url[0] ? 0 : -1;
}

void remote_servers_stop(remote_servers *s, const char *nginx_script) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "bash '%s' stop '%s/nginx'", nginx_script, s->dir);
  if (system(cmd) != 0) fprintf(stderr, "nginx stop failed\n");
  if (s->fault_pid > 0) {
    kill(s->fault_pid, SIGTERM);
    waitpid(s->fault_pid, NULL, 0);
  }
  test_dir_remove(s->dir);
}
