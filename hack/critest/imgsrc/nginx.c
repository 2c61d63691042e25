/* fake nginx for critest: pid 1 named "nginx", writes /var/run/nginx.pid,
   serves /www with busybox httpd in a child. usage: nginx PORT [ignored...] */
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
static pid_t child;
static void fwd(int s){ if (child > 0) kill(child, s); _exit(0); }
int main(int argc, char **argv){
  const char *port = argc > 1 ? argv[1] : "80";
  mkdir("/var/run", 0755);
  FILE *f = fopen("/var/run/nginx.pid", "w"); if (f) { fprintf(f, "%d\n", (int)getpid()); fclose(f); }
  printf("nginx: master process starting (httpd port %s)\n", port); fflush(stdout);
  signal(SIGTERM, fwd); signal(SIGINT, fwd); signal(SIGQUIT, fwd);
  child = fork();
  if (child == 0) { execl("/bin/busybox", "httpd", "-f", "-p", port, "-h", "/www", (char*)0); _exit(127); }
  for (;;) { int st; pid_t p = wait(&st); if (p == child) return 0; if (p < 0) pause(); }
}
