"""`tvmgen tune`: MetaSchedule tuning runs (candidates built here, timed here or on a device over RPC) that write the database compile reads (compiler/targets/database.py)."""
