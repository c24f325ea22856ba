/* storedir.h - removing a store directory a test made (any layer's test:
 * this file calls nothing of micd's). */
#ifndef MIC_STOREDIR_H
#define MIC_STOREDIR_H

/* Remove a store's files (data.mdb, lock.mdb, journal-0, journal-1) and
 * then the directory 'dir' itself; what is not there is skipped. */
void storedir_rm(const char *dir);

#endif
