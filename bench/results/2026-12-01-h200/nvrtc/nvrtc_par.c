// NVRTC parallelism: N compiles of salted copies of one program, on N threads or N processes.
#include <nvrtc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec*1e-6;}
static char*src; static int nk; static char**names;
static double one(int salt){
  size_t n=strlen(src)+64; char*s=malloc(n); snprintf(s,n,"%s\n// salt %d %d\n",src,salt,(int)getpid());
  double t0=now(); nvrtcProgram p; nvrtcCreateProgram(&p,s,"x.cu",0,0,0);
  for(int i=0;i<nk;i++) nvrtcAddNameExpression(p,names[i]);
  const char*o[]={"-std=c++17","-minimal","-arch=sm_90"};
  if(nvrtcCompileProgram(p,3,o)) puts("compile failed");
  nvrtcDestroyProgram(&p); free(s); return now()-t0;
}
static void*th(void*a){ double*r=a; *r=one((int)(long)*r); return NULL; }
int main(int argc,char**argv){
  FILE*f=fopen(argv[1],"rb");fseek(f,0,2);long L=ftell(f);rewind(f);src=malloc(L+1);fread(src,1,L,f);src[L]=0;fclose(f);
  int N=atoi(argv[2]); const char*mode=argv[3]; names=argv+4; nk=argc-4;
  printf("warm-up compile %.1f ms\n", one(-1));
  double t0=now(), r[64];
  if(!strcmp(mode,"serial")) for(int i=0;i<N;i++) r[i]=one(i);
  else if(!strcmp(mode,"threads")){ pthread_t t[64]; for(int i=0;i<N;i++){r[i]=i;pthread_create(&t[i],0,th,&r[i]);} for(int i=0;i<N;i++) pthread_join(t[i],0);}
  else { for(int i=0;i<N;i++) if(fork()==0){ double x=one(i); printf("  child %d: %.1f ms\n",i,x); fflush(stdout); _exit(0);} for(int i=0;i<N;i++) wait(0); for(int i=0;i<N;i++) r[i]=0; }
  double w=now()-t0, s=0; for(int i=0;i<N;i++) s+=r[i];
  printf("%s x%d: wall %.1f ms, mean per compile %.1f ms\n",mode,N,w,s/N);
}
