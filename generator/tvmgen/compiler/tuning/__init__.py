"""MetaSchedule tuning: the database compile reads, and the tuning run that writes it."""
