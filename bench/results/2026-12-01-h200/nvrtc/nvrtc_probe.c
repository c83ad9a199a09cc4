#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dlfcn.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec*1e-6;}
static char*rd(const char*p){FILE*f=fopen(p,"rb");fseek(f,0,2);long n=ftell(f);rewind(f);char*b=malloc(n+1);fread(b,1,n,f);b[n]=0;fclose(f);return b;}
int main(int argc,char**argv){
  char*src=rd(argv[1]); int n=argc-2;
  if(getenv("PROBE_CUINIT")){double a=now();void*h=dlopen("libcuda.so.1",RTLD_NOW);int(*ci)(unsigned)=(int(*)(unsigned))dlsym(h,"cuInit");int r=ci(0);printf("cuInit %d in %.1f ms\n",r,now()-a);}
  if(getenv("PROBE_VERSION")){int a,b;double t=now();nvrtcVersion(&a,&b);printf("version %.1f ms\n",now()-t);}
  for(int rep=0;rep<3;rep++){
  double t0=now(); nvrtcProgram p; nvrtcCreateProgram(&p,src,"x.cu",0,0,0);
  for(int i=0;i<n;i++) nvrtcAddNameExpression(p,argv[2+i]);
  const char*o[]={"-std=c++17","-minimal","-arch=sm_90"};
  nvrtcResult r=nvrtcCompileProgram(p,3,o); size_t sz=0; nvrtcGetCUBINSize(p,&sz);
  double t1=now(); if(r){size_t l;nvrtcGetProgramLogSize(p,&l);char*b=malloc(l);nvrtcGetProgramLog(p,b);puts(b);}
  printf("%d kernels: %.1f ms cubin %zu\n",n,t1-t0,sz); nvrtcDestroyProgram(&p);}
}
