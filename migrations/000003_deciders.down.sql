DROP TABLE deciders;
