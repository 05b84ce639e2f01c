#!/bin/sh
# Runs a program under mpirun as if rank r were on host r % HOSTS: sets
# DDP_HOST_ID, which ddp's host detection obeys, so that one machine can try
# the hierarchical group's layouts (HOSTS=2 and 3 ranks: hosts of different
# sizes; HOSTS=2 and 4 ranks: every host's ranks interleaved with the other's).
#   mpirun -np 4 as_hosts.sh 2 program [args...]
hosts=$1
shift
DDP_HOST_ID="host$((${OMPI_COMM_WORLD_RANK:?run under Open MPI's mpirun} % hosts))" exec "$@"
